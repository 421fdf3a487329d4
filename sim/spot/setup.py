"""From a :class:`SpotScenario` to a finished :class:`SpotSim`: prices, β tables, start time, config."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.bidbrain import (
    BidBrainParams,
    CostParams,
    EvictionTable,
    estimate_eviction_table,
)
from clustertwin.policies.spot import ACQUISITION, AcquisitionInputs, AcquisitionPolicy, FaultTolerance
from clustertwin.policies.spot.billing import billing_model
from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_replay import MarketReplay, check_coverage, series_from_table
from clustertwin.scenarios.spot_results import to_frame
from clustertwin.scenarios.spot_schema import SpotScenario
from clustertwin.sim.spot.engine import SpotConfig, SpotSim
from clustertwin.sim.spot.perf import DEFAULT_PERF
from clustertwin.sim.spot.stragglers import StragglerSlowdown
from clustertwin.traces.on_demand import BUNDLED_ON_DEMAND, InstanceType, load_on_demand
from clustertwin.traces.spot_generator import fit_price_model, generate_prices
from clustertwin.traces.spot_prices import load_bundled_or_path, select

from clustertwin.errors import InputError


@functools.lru_cache(maxsize=8)
def _load_trace(name: str) -> pd.DataFrame:
    return load_bundled_or_path(name)


@functools.lru_cache(maxsize=8)
def _load_on_demand(path: str) -> dict[str, InstanceType]:
    return load_on_demand(BUNDLED_ON_DEMAND if path == "bundled" else Path(path))


def market_table(scenario: SpotScenario) -> pd.DataFrame:
    """The canonical price table the run replays: the trace (or its synthetic twin), types and zones."""
    spec = scenario.market
    table = select(_load_trace(spec.trace), spec.instance_types, spec.zones)
    if table.empty:
        raise InputError(
            f"{scenario.source}: market",
            f"the trace has no prices for instance_types={spec.instance_types} zones={spec.zones}",
        )
    missing = sorted(set(spec.instance_types) - set(table["instance_type"]))
    if missing:
        raise InputError(f"{scenario.source}: market.instance_types", f"no prices in the trace for {missing}")
    if spec.zones is not None:
        absent = sorted(set(spec.zones) - set(table["zone"]))
        if absent:
            have = sorted(set(select(_load_trace(spec.trace), spec.instance_types)["zone"]))
            raise InputError(
                f"{scenario.source}: market.zones",
                f"the trace has no prices for {spec.instance_types} in {absent} "
                f"(it has zones {', '.join(have)})",
            )
    regions = sorted(set(table["region"]))
    if len(regions) > 1:
        raise InputError(
            f"{scenario.source}: market.zones",
            f"the selected markets span regions {', '.join(regions)}; a run replays one region (one "
            "on-demand price table): list zones of one region",
        )
    if spec.synthetic is None:
        return table
    return _synthetic_twin(scenario, table)


def _synthetic_twin(scenario: SpotScenario, table: pd.DataFrame) -> pd.DataFrame:
    """Fit each market on the training window, then generate the whole span from the fitted models."""
    spec = scenario.market
    od = _load_on_demand(spec.on_demand)
    origin = table["timestamp"].min()
    train_end = origin + pd.Timedelta(days=spec.train_days)
    span_s = (table["timestamp"].max() - origin).total_seconds()
    train = table[table["timestamp"] < train_end]
    models = []
    for (itype, zone), _rows in table.groupby(["instance_type", "zone"], sort=True):
        try:
            model = fit_price_model(train, str(itype), str(zone), od[str(itype)].on_demand_price)
        except InputError:
            continue  # too few changes to fit in the training window: leave the market out
        syn = spec.synthetic
        assert syn is not None
        model = model.with_spikes(
            model.spikes_per_h if syn.spikes_per_h is None else syn.spikes_per_h,
            model.spike_multiple if syn.spike_multiple is None else syn.spike_multiple,
            model.spike_mean_s if syn.spike_mean_s is None else syn.spike_mean_s,
        )
        models.append(model)
    if not models:
        raise InputError(f"{scenario.source}: market.synthetic", "no market has enough prices to fit a model")
    # The trace itself depends only on the seed, not on the job start, so every run of a reproduction
    # with the same seed faces the same synthetic market.
    return generate_prices(models, origin, span_s, np.random.default_rng([scenario.seed, 0x5EED]))


# β tables by (trace, markets, window, synthetic spec, seed, step): estimating them is the slow part of a
# run, and a reproduction reuses them across hundreds of runs in one process.
_TABLES: dict[tuple, EvictionTable] = {}


def eviction_table(scenario: SpotScenario, table: pd.DataFrame) -> EvictionTable:
    """β / TTE tables from the trace's first ``train_days`` (cached per trace, markets and window)."""
    spec = scenario.market
    key = (
        spec.trace,
        tuple(spec.instance_types),
        tuple(spec.zones or ()),
        spec.train_days,
        spec.synthetic.model_dump_json() if spec.synthetic else "",
        scenario.seed if spec.synthetic else -1,
        scenario.bidbrain.table_step_s,
    )
    if key not in _TABLES:
        origin = table["timestamp"].min()
        series = series_from_table(table, origin)
        _TABLES[key] = estimate_eviction_table(
            series, (0.0, spec.train_days * 86400.0), step_s=scenario.bidbrain.table_step_s
        )
    return _TABLES[key]


def start_time(scenario: SpotScenario, table: pd.DataFrame) -> pd.Timestamp:
    """The job's start: given, or drawn (seeded) from the evaluation part of the trace."""
    spec = scenario.market
    if spec.start is not None:
        try:
            stamp = pd.Timestamp(spec.start)
        except ValueError:
            raise InputError(f"{scenario.source}: market.start", f"not an ISO time: {spec.start!r}") from None
        return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    origin = table["timestamp"].min()
    lo = origin + pd.Timedelta(days=spec.train_days)
    hi = table["timestamp"].max() - pd.Timedelta(hours=scenario.job.reference_hours * 2)
    if hi <= lo:
        raise InputError(
            f"{scenario.source}: market.train_days",
            "no evaluation time is left after the training window for a job of this length",
        )
    rng = np.random.default_rng([scenario.seed, 0x57A27])
    offset = rng.uniform(0.0, (hi - lo).total_seconds())
    return lo + pd.Timedelta(seconds=round(offset))


def policies(scenario: SpotScenario, table: pd.DataFrame) -> tuple[AcquisitionPolicy, FaultTolerance]:
    """The scenario's acquisition policy and fault-tolerance scheme, built from their registries."""
    b, a, c = scenario.bidbrain, scenario.agileml, scenario.checkpoint
    inputs = AcquisitionInputs(
        bidbrain=BidBrainParams(
            cost=CostParams(phi=b.phi, sigma_s=b.sigma_s, lambda_s=b.lambda_s),
            period_s=b.period_s,
            renewal_lead_s=b.renewal_lead_s,
        ),
        eviction_table=lambda: eviction_table(scenario, table),
    )
    fault_tolerance = scenario.fault_tolerance_scheme(
        reliable_count=a.reliable_count, poll_s=a.poll_s, checkpoint_interval_s=c.interval_s
    )
    return ACQUISITION.get(scenario.policy)(inputs), fault_tolerance


def build(scenario: SpotScenario) -> tuple[SpotConfig, MarketReplay, list, pd.Timestamp]:
    """The engine's inputs for a scenario."""
    if scenario.real is not None and not scenario.real.market:
        raise InputError(
            f"{scenario.source}: field real",
            "real describes a real run (processes and an eviction schedule), which a market simulation"
            " cannot honour; its simulator prediction is made by --backend real (it is anchored on the"
            " run's measured step rate). Remove real to simulate the market",
        )
    spec = scenario.market
    od = _load_on_demand(spec.on_demand)
    named = [
        *(("market.instance_types", t) for t in spec.instance_types),
        ("job.reference_type", scenario.job.reference_type),
        ("agileml.reliable_type", scenario.agileml.reliable_type),
    ]
    for field, itype in named:
        if itype not in od:
            raise InputError(
                f"{scenario.source}: {field}",
                f"instance type {itype} is not in the on-demand price table (it has {', '.join(sorted(od))})",
            )
    rates = {name: float(t.vcpus) for name, t in od.items()}  # ν = vCPUs, as in Proteus §4.1
    rates.update(scenario.job.work_rate)
    table = market_table(scenario)
    start = start_time(scenario, table)
    series = series_from_table(table, start)
    covered = None
    if spec.synthetic is not None:
        # A generated market writes only its changes and holds its last price to the span's end by
        # construction (the span of the real trace it was fitted to, see _synthetic_twin).
        real = select(_load_trace(spec.trace), spec.instance_types, spec.zones)
        covered = (real["timestamp"].max() - start).total_seconds()
    stale_s = spec.max_stale_h * 3600.0
    check_coverage(series, 0.0, 0.0, stale_s, f"{scenario.source}: market.start", start, covered)
    market = MarketReplay(series, covered)
    ref_rate = scenario.job.reference_count * rates[scenario.job.reference_type]
    work = scenario.job.work if scenario.job.work is not None else ref_rate * scenario.job.reference_hours
    billing = billing_model(scenario.billing.model, scenario.billing.warning_s)
    acquisition, fault_tolerance = policies(scenario, table)
    config = SpotConfig(
        acquisition=acquisition,
        fault_tolerance=fault_tolerance,
        billing=billing,
        total_work=work,
        target_rate=ref_rate,
        max_rate=ref_rate * scenario.job.max_scale,
        on_demand_prices={name: t.on_demand_price for name, t in od.items()},
        work_rates=rates,
        reliable_type=scenario.agileml.reliable_type,
        reference_type=scenario.job.reference_type,
        request_delay_s=scenario.provisioning.request_delay_s,
        boot_s=scenario.provisioning.boot_s,
        partition_mb=scenario.agileml.partition_mb,
        nic_gbps=scenario.agileml.nic_gbps,
        perf=DEFAULT_PERF,
        preemption_rate_per_s=scenario.billing.preemptions_per_h / 3600.0,
        max_runtime_s=scenario.max_runtime_h * 3600.0,
        straggle=None
        if scenario.stragglers is None
        else StragglerSlowdown(scenario.stragglers, scenario.seed).factor,
    )
    return config, market, market.markets, start


def run(scenario: SpotScenario, progress: Callable[[float, str], None] | None = None) -> RunResult:
    """Simulate a spot scenario; see ``sim/spot/tables.py`` for the tables' column contract."""
    wall = time.perf_counter()
    config, market, markets, start = build(scenario)
    sim = SpotSim(config, market, markets, np.random.default_rng(scenario.seed), progress)
    sim.run()
    # The prices the run was billed at must come from the trace, not from its last row held forever.
    check_coverage(
        market.series,
        0.0,
        float(sim.env.now),
        scenario.market.max_stale_h * 3600.0,
        f"{scenario.source}: market.max_stale_h",
        start,
        market.covered_until_s,
    )
    books = sim.books
    tables = {
        "acquisitions": to_frame("acquisitions", books.acquisitions),
        "evictions": to_frame("evictions", books.evictions),
        "bills": to_frame("bills", books.bills),
        "progress": to_frame("progress", books.progress),
        "usage": to_frame("usage", books.usage),
    }
    info: dict[str, float | int | str] = {
        "start_timestamp": start.isoformat(),
        "total_work": config.total_work,
        "reference_rate": config.target_rate,
        "reference_on_demand_usd_per_h": config.target_rate
        / config.work_rates[scenario.job.reference_type]
        * config.on_demand_prices[scenario.job.reference_type],
        "completed": int(not math.isnan(sim.finished_s)),
        "runtime_s": sim.finished_s,
        "work_done": sim.done,
        "work_integrated": sim.integrated,
        "work_lost": sim.lost,
        "wall_s": time.perf_counter() - wall,
    }
    return RunResult(tables, info)
