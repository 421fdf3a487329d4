"""The synthetic 2016 auction market: derived from the paper's reported figures, and bid-dependent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.traces.auction_market import BUNDLED_PROTEUS_2016, auction_spikes
from clustertwin.traces.spot_generator import PriceModel, generate_prices

from clustertwin.errors import InputError


def test_spike_rate_follows_the_checkpoint_interval() -> None:
    short, long = auction_spikes(900.0), auction_spikes(3600.0)
    # Young: M = interval / (2 * overhead); a longer interval means rarer spikes.
    assert short.spikes_per_h == pytest.approx(4 * long.spikes_per_h)
    assert long.spike_multiple > 1.0  # spikes must evict a bid at the on-demand price


def _evicted_within_hour(times: np.ndarray, prices: np.ndarray, delta: float, od: float | None) -> float:
    """Share of hourly starts at which a bid (price + delta, or ``od``) is exceeded within the hour."""
    starts = np.arange(0.0, times[-1] - 3600.0, 600.0)
    hits = 0
    for t0 in starts:
        p0 = prices[np.searchsorted(times, t0, side="right") - 1]
        bid = od if od is not None else p0 + delta
        window = prices[(times > t0) & (times <= t0 + 3600.0)]
        hits += bool((window > bid).any())
    return hits / len(starts)


def test_evictions_depend_on_the_bid() -> None:
    spikes = auction_spikes(1800.0)
    model = PriceModel("c4.2xlarge", "us-east-1a", 0.1, 0.398, 4.0, 0.5, 0.05).with_spikes(
        spikes.spikes_per_h, spikes.spike_multiple, spikes.spike_mean_s
    )
    table = generate_prices(
        [model], pd.Timestamp("2016-06-11", tz="UTC"), 10 * 86400.0, np.random.default_rng(3)
    )
    times = (table["timestamp"] - table["timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    prices = table["price"].to_numpy()
    betas = [_evicted_within_hour(times, prices, d, None) for d in (0.0001, 0.01, 0.05, 0.4)]
    assert all(a >= b for a, b in zip(betas, betas[1:], strict=False))
    assert betas[0] > betas[-1]
    # A bid at on-demand is evicted by spikes only, about as often as spikes come (per hour, <= rate).
    at_od = _evicted_within_hour(times, prices, 0.0, 0.398)
    assert 0.0 < at_od <= 1 - np.exp(-2 * spikes.spikes_per_h)


def test_bad_facts_name_the_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "facts.yaml"
    bad.write_text(BUNDLED_PROTEUS_2016.read_text().replace("value: 0.17", "value: 1.5"))
    with pytest.raises(InputError, match="checkpoint_overhead"):
        auction_spikes(1800.0, bad)
