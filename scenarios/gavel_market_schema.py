"""The optional ``market:`` section of a Gavel scenario: a cloud fleet of on-demand and spot instances.

Gavel's cost policies ([Narayanan] §6.4) plan with $/GPU-hour prices; chapter 6 notes that spot prices
float with demand (AWS: capped at on demand, 2-minute warning) and that a price change should trigger a
recompute. This section replays a real price trace under that model, with the market machinery of the
Proteus work ([Proteus] §2–§3: bids, eviction when the price exceeds the bid, a warning, billing schemes).

Checks that need the trace or the on-demand table (an instance type without prices, a start outside the
trace) are made when the run is built (``scenarios.gavel_fleet.build_market``) and name the field too.
"""

from __future__ import annotations

from typing import Literal

from clustertwin.scenarios.price_fields import iso_text, on_demand_table, price_trace
from clustertwin.traces.spot_prices import BUNDLED_SPOT_TRACES
from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    field_validator,
    model_validator,
)

# Path fields of the section for the loader (relative to the scenario file), with their keywords.
MARKET_PATH_FIELDS: dict[str, tuple[str, ...]] = {
    "market.trace": tuple(BUNDLED_SPOT_TRACES),
    "market.on_demand_prices": ("bundled",),
}


class _Strict(BaseModel):
    # Same rules as scenarios.gavel_schema._Strict (not imported: schema.py imports this module).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MarketType(_Strict):
    """One Gavel worker type in the cloud: which instance it is, in which zone, and the fleet of it.

    A worker is one instance (a server of ``cluster.gpus_per_server`` GPUs: the instance's GPU count must
    match). ``on_demand + spot`` must equal the type's servers in ``cluster.gpus``.
    """

    instance_type: str  # e.g. p3.2xlarge (1 V100), p2.xlarge (1 K80), p3.8xlarge (4 V100)
    zone: str  # availability zone of the spot market, e.g. us-east-1b (on-demand is not zonal here)
    on_demand: NonNegativeInt = 0  # on-demand instances (never evicted)
    spot: NonNegativeInt = 0  # spot instances (evicted when the price exceeds the bid)
    bid_multiple: PositiveFloat = 1.0  # bid = this × the on-demand price (1.0: the Standard bid)
    bid_usd: PositiveFloat | None = None  # $/instance-hour; overrides bid_multiple


class GavelMarket(_Strict):
    """Price trace, billing and provisioning rules shared by every worker type of the fleet."""

    trace: str = "aws-p2-p3-us-east-1-2020"  # a bundled trace name or a price file (traces/spot_prices.py)
    on_demand_prices: str = "bundled"  # on-demand table (instance_type,vcpus,gpus,price) or "bundled"
    start: str  # ISO time in the trace where the replay starts (t = 0 of the run)
    billing: Literal["per_second", "hourly_refund"] = "per_second"  # AWS since 2017 / EC2 in 2016
    warning_s: NonNegativeFloat = 120.0  # eviction notice (EC2: 2 minutes)
    request_delay_s: NonNegativeFloat = 60.0  # a re-request is granted (if the bid still holds) after this
    boot_s: NonNegativeFloat = 120.0  # a granted instance is billed while it boots, usable after it
    # The run may go at most this far past a spot market's last price row (AWS records only changes);
    # further is an error (scenarios.spot_replay.check_coverage), not the last price forever.
    max_stale_h: PositiveFloat = 48.0
    types: dict[str, MarketType]

    _iso = field_validator("start", mode="before")(iso_text)
    _trace_exists = field_validator("trace")(price_trace)
    _table_exists = field_validator("on_demand_prices")(on_demand_table)

    @model_validator(mode="after")
    def _some_workers(self) -> GavelMarket:
        if not self.types:
            raise ValueError("types must name at least one worker type")
        return self
