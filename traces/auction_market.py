"""A synthetic auction-era spot market: the spike process of the 2016 AWS market the Proteus paper's cost
claims were measured on ([Proteus] §2.2, §6.3, Fig. 3), derived from what the paper reports about that
market (``data/spot/proteus_2016_market.yaml``; no 2016 trace is public). Labelled synthetic wherever it is
used.

In that market a spot machine was evicted when the price rose above its bid (§2.2), and prices spiked
above the on-demand price (Fig. 3: "all the spikes"). The derivation:

* **Spike rate.** The checkpointing baseline bids the on-demand price, so only spikes evict it, and it
  checkpoints at an MTTF-based interval with a 17% overhead (§6.3). With Young's interval
  ``τ = sqrt(2·C·M)`` the overhead ``C/τ`` fixes ``M = τ / (2·overhead)`` for a given interval τ: the
  mean time between spikes above on-demand. With the bundled scenario's 30-minute interval, M ≈ 1.5 h.
* **Spike height.** BidBrain's bid deltas reach $0.4 (§4.1) above a c4.2xlarge price of about a quarter of
  its $0.398 on-demand price (the 70-80% discount, §1): spikes reach that far, ``(d·OD + 0.4) / OD`` ≈
  1.25 × on-demand, or the grid's top would never be evicted.
* **Spike length**: not reported; an assumed 30 minutes.

Between spikes prices follow the model fitted to the replayed trace (traces/spot_generator.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml
from clustertwin.traces.files import read_text

from clustertwin.errors import InputError

BUNDLED_PROTEUS_2016 = Path(__file__).resolve().parent / "data" / "spot" / "proteus_2016_market.yaml"


@dataclass(frozen=True)
class SpikeProcess:
    spikes_per_h: float
    spike_multiple: float  # × on-demand
    spike_mean_s: float


def auction_spikes(checkpoint_interval_s: float, path: Path = BUNDLED_PROTEUS_2016) -> SpikeProcess:
    """The spike process of the synthetic 2016 market, for a checkpoint interval (see the module doc)."""
    if not checkpoint_interval_s > 0:
        raise ValueError(f"a checkpoint interval must be > 0 s, got {checkpoint_interval_s}")
    facts = _facts(path)
    overhead = _value(facts, "checkpoint_overhead", path, upper=1.0)
    mttf_s = checkpoint_interval_s / (2.0 * overhead)
    discount = facts.get("discount")
    if not isinstance(discount, dict) or not 0 < discount.get("low", -1) <= discount.get("high", -1) < 1:
        raise InputError(f"{path}: discount", "expected {low, high} with 0 < low <= high < 1")
    od = facts.get("instance", {}).get("on_demand_usd") if isinstance(facts.get("instance"), dict) else None
    if not isinstance(od, int | float) or not od > 0:
        raise InputError(f"{path}: instance.on_demand_usd", "expected a price > 0")
    level = 1.0 - (discount["low"] + discount["high"]) / 2.0
    multiple = (level * od + _value(facts, "bid_delta_max_usd", path)) / od
    return SpikeProcess(3600.0 / mttf_s, multiple, _value(facts, "spike_mean_s", path))


def _facts(path: Path) -> dict:
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as err:
        raise InputError(str(path), f"not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a mapping of facts")
    return data


def _value(facts: dict, key: str, path: Path, upper: float = math.inf) -> float:
    entry = facts.get(key)
    value = entry.get("value") if isinstance(entry, dict) else None
    if not isinstance(value, int | float) or not 0 < value < upper:
        raise InputError(f"{path}: {key}.value", f"expected a number in (0, {upper:g}), got {value!r}")
    return float(value)
