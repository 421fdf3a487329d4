"""Gavel data in ``traces/``: throughput table, trace loader/writer, synthetic job generator."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
from clustertwin.traces import bundled
from clustertwin.traces.gavel_generator import MULTIPLE_SCALE_FACTORS, SLO_FACTORS, generate_gavel_jobs
from clustertwin.traces.gavel_throughputs import ThroughputTable
from clustertwin.traces.gavel_trace import TraceJob, load_gavel_trace, slo_deadline_s, write_gavel_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.errors import InputError

MSR_DIR = Path("/work/shared/data/gavel/traces/msr/seed=0")
PHYSICAL_TRACES = sorted(bundled.GAVEL_PHYSICAL_TRACES.glob("*.trace"))


@pytest.fixture(scope="module")
def table() -> ThroughputTable:
    return ThroughputTable.bundled("simulation")


@pytest.fixture(scope="module")
def raw() -> dict:
    return json.loads(bundled.GAVEL_SIMULATION_THROUGHPUTS.read_text())


def _key(text: str) -> tuple[str, int]:
    return ast.literal_eval(text)


# ------------------------------------------------------------------------------ throughput table
def test_bundled_tables_have_gavel_types_fastest_first() -> None:
    for which in ("simulation", "physical"):
        t = ThroughputTable.bundled(which)
        assert t.worker_types == ("v100", "p100", "k80")
        assert len(t.job_types()) == 26
    assert ThroughputTable.bundled() is ThroughputTable.bundled("simulation")


def test_isolated_equals_raw_json_for_every_key(table: ThroughputTable, raw: dict) -> None:
    for wt in table.worker_types:
        for text, entry in raw[wt].items():
            job_type, sf = _key(text)
            assert table.has(job_type, sf)
            assert table.isolated(job_type, sf, wt) == entry["null"]
            uncons = raw[f"{wt}_unconsolidated"].get(text, entry)
            assert table.isolated(job_type, sf, wt, consolidated=False) == uncons["null"]


def test_unconsolidated_falls_back_to_consolidated_where_the_entry_is_missing(
    table: ThroughputTable, raw: dict
) -> None:
    missing = set(raw["k80"]) - set(raw["k80_unconsolidated"])
    assert missing  # Gavel's k80_unconsolidated lacks some ResNet-50 distributed entries
    for text in missing:
        job_type, sf = _key(text)
        assert table.isolated(job_type, sf, "k80", consolidated=False) == raw["k80"][text]["null"]
    # Where the unconsolidated entry exists and differs, it is the one returned.
    differing = [k for k in raw["v100_unconsolidated"] if raw["v100_unconsolidated"][k] != raw["v100"][k]]
    job_type, sf = _key(differing[0])
    assert (
        table.isolated(job_type, sf, "v100", consolidated=False)
        == raw["v100_unconsolidated"][differing[0]]["null"]
    )
    assert table.isolated(job_type, sf, "v100", consolidated=False) != table.isolated(job_type, sf, "v100")


def test_absent_entries_read_as_zero(table: ThroughputTable) -> None:
    assert table.isolated("No such job", 1, "v100") == 0.0
    assert table.isolated("A3C", 2, "v100") == 0.0
    assert table.isolated("A3C", 1, "tpu") == 0.0
    assert not table.has("A3C", 2)
    assert table.scale_factors("A3C") == (1,)
    assert table.scale_factors("ResNet-50 (batch size 64)") == (1, 2, 4, 8)
    assert table.scale_factors("nope") == ()


def test_isolated_matrix_equals_scalar_lookups(table: ThroughputTable) -> None:
    rng = np.random.default_rng(0)
    all_keys = [(t, sf) for t in table.job_types() for sf in table.scale_factors(t)]
    keys = [all_keys[i] for i in rng.integers(0, len(all_keys), 200)] + [("unknown", 1), ("A3C", 4)]
    types = ["k80", "tpu", "v100", "p100"]
    for consolidated in (True, False):
        m = table.isolated_matrix(keys, types, consolidated=consolidated)
        assert m.shape == (len(keys), len(types))
        expected = [[table.isolated(t, sf, wt, consolidated) for wt in types] for t, sf in keys]
        np.testing.assert_array_equal(m, expected)
    default = table.isolated_matrix(keys[:3])
    assert default.shape == (3, 3)
    default[0, 0] = -1.0  # a fresh array: writing to it must not change the table
    assert table.isolated(*keys[0], "v100") >= 0


def test_colocated_equals_raw_json(table: ThroughputTable, raw: dict) -> None:
    for wt in ("v100", "k80"):
        for text, entry in list(raw[wt].items())[::10]:
            for other_text, both in list(entry.items())[1:4]:
                got = table.colocated(_key(text), _key(other_text), wt)
                assert got == (both[0], both[1])
    a, b = ("ResNet-18 (batch size 16)", 1), ("ResNet-18 (batch size 32)", 2)
    assert table.colocated(a, b, "v100") is None
    assert table.colocated(a, a, "tpu") is None
    text = "('ResNet-18 (batch size 16)', 2)"
    other = "('ResNet-18 (batch size 32)', 2)"
    got = table.colocated(_key(text), _key(other), "v100", consolidated=False)
    assert got == tuple(raw["v100_unconsolidated"][text][other])


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ([], None),
        ({"v100": 3}, "'v100'"),
        ({"v100": {"ResNet": {"null": 1.0}}}, "'ResNet'"),
        ({"v100": {"('A', 0)": {"null": 1.0}}}, "('A', 0)"),
        ({"v100": {"('A', 1)": {}}}, "('A', 1)"),
        ({"v100": {"('A', 1)": {"null": -1.0}}}, "('A', 1)"),
        ({"v100": {"('A', 1)": {"null": "fast"}}}, "('A', 1)"),
        ({"v100": {"('A', 1)": {"null": 1.0, "('B', 1)": [1.0]}}}, "('B', 1)"),
        ({"v100": {"('A', 1)": {"null": 1.0, "B": [1.0, 2.0]}}}, "'B'"),
        ({"v100": {"('A', 1)": {"null": 1.0}}, "k80_unconsolidated": {}}, "k80_unconsolidated"),
    ],
)
def test_bad_json_schema_names_file_and_key(tmp_path: Path, content: object, named: str | None) -> None:
    path = _write(tmp_path, "t.json", json.dumps(content))
    with pytest.raises(InputError) as err:
        ThroughputTable.load(path)
    assert err.value.where.startswith(str(path))
    if named is not None:
        assert named in err.value.where


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.json", '{"v100":\n {"x": }\n}')
    with pytest.raises(InputError) as err:
        ThroughputTable.from_json(path)
    assert err.value.where.startswith(f"{path}:2:")  # line and column


def test_csv_table(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "profile.csv",
        "job_type,scale_factor,worker_type,throughput\n"
        "ResNet-50,1,k80,0.5\nResNet-50,1,a100,9.0\nResNet-50,2,v100,7.5\n\nLM,1,v100,3\n",
    )
    t = ThroughputTable.load(path)
    assert t.worker_types == ("v100", "k80", "a100")
    assert t.job_types() == ("ResNet-50", "LM")
    assert t.isolated("ResNet-50", 2, "v100") == 7.5
    assert t.isolated("ResNet-50", 2, "v100", consolidated=False) == 7.5
    assert t.isolated("ResNet-50", 2, "k80") == 0.0
    assert t.colocated(("LM", 1), ("LM", 1), "v100") is None
    np.testing.assert_array_equal(
        t.isolated_matrix([("LM", 1), ("ResNet-50", 1)], ["a100", "v100"]), [[0, 3], [9, 0]]
    )


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("job,scale_factor,worker_type,throughput\n", ":1"),
        ("A,x,v100,1\n", ":2: column scale_factor"),
        ("A,0,v100,1\n", ":2: column scale_factor"),
        ("A,1,v100,-2\n", ":2: column throughput"),
        ("A,1,v100,nan\n", ":2: column throughput"),
        ("A,1,v100,fast\n", ":2: column throughput"),
        ("A,1,v100,1\nB,1,v100\n", ":3"),
        ("A,1,v100,1\n ,1,v100,1\n", ":3: column job_type"),
        ("A,1,v100,1\nA,1,v100,2\n", ":3"),
    ],
)
def test_bad_csv_names_the_line(tmp_path: Path, body: str, where: str) -> None:
    header = "" if body.startswith("job,") else "job_type,scale_factor,worker_type,throughput\n"
    path = _write(tmp_path, "t.csv", header + body)
    with pytest.raises(InputError) as err:
        ThroughputTable.load(path)
    assert err.value.where == f"{path}{where}"


def test_load_rejects_unknown_suffix_missing_file_and_unknown_bundle(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="format"):
        ThroughputTable.load(_write(tmp_path, "t.txt", "{}"))
    with pytest.raises(InputError, match="no such file"):
        ThroughputTable.load(tmp_path / "absent.json")
    with pytest.raises(InputError):
        ThroughputTable.bundled("cloud")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- traces
@pytest.mark.parametrize("path", PHYSICAL_TRACES, ids=lambda p: p.name)
def test_bundled_physical_traces_load_with_both_tables(path: Path) -> None:
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    for which in ("simulation", "physical"):
        jobs = load_gavel_trace(path, table=ThroughputTable.bundled(which))
        assert len(jobs) == len(rows)
    for job, cells in zip(jobs, rows, strict=True):
        assert (job.job_type, job.command) == (cells[0], cells[1])
        assert (job.total_steps, job.scale_factor) == (int(cells[5]), int(cells[6]))
        assert (job.priority_weight, job.arrival_s) == (float(cells[7]), float(cells[9]))
        assert job.slo is None  # every bundled trace has SLO -1
    assert [j.line for j in jobs] == list(range(1, len(rows) + 1))


def test_bundled_gavel_files_are_verbatim_copies() -> None:
    shared = Path("/work/shared/data/gavel")
    if not shared.is_dir():
        pytest.skip("shared data folder not present")
    assert len(PHYSICAL_TRACES) == 8
    pairs = [(p, shared / "traces" / "physical_cluster" / p.name) for p in PHYSICAL_TRACES] + [
        (bundled.GAVEL_DIR / name, shared / name)
        for name in ("simulation_throughputs.json", "physical_cluster_throughputs.json", "job_types.csv")
    ]
    for ours, theirs in pairs:
        assert ours.read_bytes() == theirs.read_bytes(), ours.name
    assert (bundled.GAVEL_DIR / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.skipif(not MSR_DIR.is_dir(), reason="shared msr traces not present")
def test_msr_seven_column_traces(table: ThroughputTable) -> None:
    files = sorted(MSR_DIR.glob("*.trace"))
    assert len(files) == 15
    total = 0
    for path in files:
        lines = path.read_text().splitlines()
        jobs = load_gavel_trace(path, fmt="7col")
        assert jobs == load_gavel_trace(path)
        assert len(jobs) == len(lines)
        total += len(jobs)
        first = lines[0].split("\t")
        assert (jobs[0].total_steps, jobs[0].arrival_s, jobs[0].scale_factor) == (
            int(first[4]),
            float(first[5]),
            int(first[6]),
        )
        assert all(j.priority_weight == 1.0 and j.slo is None for j in jobs)
        # With the table, the first row the table cannot serve must be the one named.
        bad = next(
            (
                i
                for i, line in enumerate(lines, 1)
                if not table.has(line.split("\t")[0], int(line.split("\t")[6]))
            ),
            None,
        )
        if bad is None:
            assert load_gavel_trace(path, table=table) == jobs
        else:
            with pytest.raises(InputError) as err:
                load_gavel_trace(path, table=table)
            assert err.value.where.startswith(f"{path}:{bad}: column ")
    assert total == 15264


def _row(job_type="A3C", steps="100", sf="1", prio="1", slo="-1.000000", arrival="0", ndd="0") -> str:
    return "\t".join([job_type, "python3 main.py %s", "rl", "--steps", ndd, steps, sf, prio, slo, arrival])


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        ([_row(), _row()[:-2]], ":2"),
        (["a\tb\tc"], ":1"),
        ([_row(steps="many")], ":1: column total_steps"),
        ([_row(steps="-5")], ":1: column total_steps"),
        ([_row(steps="0")], ":1: column total_steps"),
        ([_row(steps="12.5")], ":1: column total_steps"),
        ([_row(arrival="-1")], ":1: column arrival_time"),
        ([_row(arrival="nan")], ":1: column arrival_time"),
        ([_row(arrival="5"), _row(arrival="9"), _row(arrival="7")], ":3: column arrival_time"),
        ([_row(sf="0")], ":1: column scale_factor"),
        ([_row(prio="0")], ":1: column priority_weight"),
        ([_row(slo="soon")], ":1: column SLO"),
        ([_row(slo="0")], ":1: column SLO"),
        ([_row(ndd="2")], ":1: column needs_data_dir"),
        ([_row(job_type=" ")], ":1: column job_type"),
        (["\t".join(["A3C", "cmd", "-n", "1", "10", "later", "1"])], ":1: column arrival_time"),
        ([_row(), "\t".join(["A3C", "cmd", "-n", "1", "10", "3", "1"])], ":2"),
    ],
)
def test_bad_trace_rows_name_file_line_and_column(tmp_path: Path, lines: list[str], where: str) -> None:
    path = _write(tmp_path, "bad.trace", "\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        load_gavel_trace(path)
    assert err.value.where == f"{path}{where}"


def test_trace_rows_unknown_to_the_table_name_the_line(tmp_path: Path, table: ThroughputTable) -> None:
    path = _write(tmp_path, "t.trace", "\n".join([_row(), _row(job_type="GPT-9")]))
    with pytest.raises(InputError) as err:
        load_gavel_trace(path, table=table)
    assert err.value.where == f"{path}:2: column job_type"
    path = _write(tmp_path, "t.trace", "\n".join([_row(), _row(), _row(sf="2")]))
    with pytest.raises(InputError) as err:
        load_gavel_trace(path, table=table)
    assert err.value.where == f"{path}:3: column scale_factor"
    assert len(load_gavel_trace(path)) == 3  # without the table the same rows are valid


def test_trace_format_is_forced_or_detected(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.trace", _row(slo="2.5", prio="5", arrival="7.25") + "\r\n\n")
    (job,) = load_gavel_trace(path)
    assert (job.slo, job.priority_weight, job.arrival_s, job.line) == (2.5, 5.0, 7.25, 1)
    with pytest.raises(InputError) as err:
        load_gavel_trace(path, fmt="7col")
    assert err.value.where == f"{path}:1"
    with pytest.raises(InputError):
        load_gavel_trace(path, fmt="csv")  # type: ignore[arg-type]
    with pytest.raises(InputError) as err:
        load_gavel_trace(_write(tmp_path, "empty.trace", "\n"))
    assert err.value.where.endswith("empty.trace")


def test_generated_trace_round_trips_through_a_file(tmp_path: Path, table: ThroughputTable) -> None:
    jobs = generate_gavel_jobs(
        table, num_jobs=300, jobs_per_hour=3.0, seed=4, scale_factors="multiple", priorities=True, slos=True
    )
    jobs[0] = TraceJob("A3C", 1, 7, 0.0, command="python3 main.py --data %s/pong")
    path = tmp_path / "out" / "gen.trace"
    write_gavel_trace(jobs, path)
    back = load_gavel_trace(path, table=table)
    assert back == jobs
    assert [j.line for j in back] == list(range(1, 301))
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_write_refuses_a_tab_in_a_command(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="tabs"):
        write_gavel_trace([TraceJob("A3C", 1, 5, 0.0, command="a\tb")], tmp_path / "x.trace")
    assert not (tmp_path / "x.trace").exists()


def test_slo_deadline_is_a_factor_of_the_isolated_duration(table: ThroughputTable) -> None:
    tput = table.isolated("A3C", 1, "v100")
    job = TraceJob("A3C", 1, total_steps=round(3600 * tput), arrival_s=100.0, slo=2.0)
    assert slo_deadline_s(job, table) == pytest.approx(100.0 + 2.0 * 3600, abs=1.0)
    assert slo_deadline_s(TraceJob("A3C", 1, 10, 0.0), table) is None
    with pytest.raises(InputError):
        slo_deadline_s(TraceJob("A3C", 1, 10, 0.0, slo=1.2), table, reference_worker="tpu")


# ---------------------------------------------------------------------------------- generator
def test_generator_is_deterministic(table: ThroughputTable) -> None:
    kw = dict(num_jobs=200, jobs_per_hour=2.0, scale_factors="multiple", priorities=True, slos=True)
    assert generate_gavel_jobs(table, seed=1, **kw) == generate_gavel_jobs(table, seed=1, **kw)
    assert generate_gavel_jobs(table, seed=1, **kw) != generate_gavel_jobs(table, seed=2, **kw)


def test_each_attribute_has_its_own_stream(table: ThroughputTable) -> None:
    base = generate_gavel_jobs(table, num_jobs=500, jobs_per_hour=1.0, seed=9)
    extras = generate_gavel_jobs(table, num_jobs=500, jobs_per_hour=1.0, seed=9, priorities=True, slos=True)
    assert [(j.job_type, j.total_steps, j.arrival_s) for j in base] == [
        (j.job_type, j.total_steps, j.arrival_s) for j in extras
    ]
    assert {j.priority_weight for j in extras} == {1.0, 5.0}
    multi = generate_gavel_jobs(table, num_jobs=500, jobs_per_hour=1.0, seed=9, scale_factors="multiple")
    assert [j.arrival_s for j in multi] == [j.arrival_s for j in base]
    single_sf = [(b, m) for b, m in zip(base, multi, strict=True) if m.scale_factor == 1]
    assert 300 < len(single_sf) < 400
    assert all(b == m for b, m in single_sf)  # same type and same duration, hence same steps


def test_static_trace_and_fixed_durations(table: ThroughputTable) -> None:
    jobs = generate_gavel_jobs(table, num_jobs=400, jobs_per_hour=None, seed=3, duration=(12, 24), slos=True)
    assert all(j.arrival_s == 0.0 for j in jobs)
    hours = set()
    for j in jobs:
        tput = table.isolated(j.job_type, j.scale_factor, "v100")
        seconds = j.total_steps / tput
        assert min(abs(seconds - 12 * 3600), abs(seconds - 24 * 3600)) <= 0.5 / tput
        hours.add(round(seconds / 3600))
        assert slo_deadline_s(j, table) == pytest.approx(
            j.slo * round(seconds / 3600) * 3600, abs=j.slo / tput
        )
    assert hours == {12, 24}


def test_generator_statistics_over_20k_jobs(table: ThroughputTable) -> None:
    n, lam = 20_000, 4.0
    jobs = generate_gavel_jobs(
        table, num_jobs=n, jobs_per_hour=lam, seed=0, scale_factors="multiple", priorities=True, slos=True
    )
    sfs = np.array([j.scale_factor for j in jobs])
    for sf, p in MULTIPLE_SCALE_FACTORS.items():
        assert abs(np.mean(sfs == sf) - p) < 0.015
    arrivals = np.array([j.arrival_s for j in jobs])
    assert arrivals[0] == 0.0
    assert abs(np.mean(np.diff(arrivals)) / (3600 / lam) - 1) < 0.03
    duration_s = np.array([j.total_steps / table.isolated(j.job_type, j.scale_factor, "v100") for j in jobs])
    assert duration_s.min() >= 60 * 10**1.5 * 0.999 and duration_s.max() <= 60 * 10**4 * 1.001
    assert abs(np.mean(duration_s > 60 * 10**3) - 0.2) < 0.015
    assert abs(np.mean([j.priority_weight == 5.0 for j in jobs]) - 0.2) < 0.015
    for factor in SLO_FACTORS:
        assert abs(np.mean([j.slo == factor for j in jobs]) - 1 / 3) < 0.015
    single = [j.job_type for j in jobs if j.scale_factor == 1]
    counts = np.array([single.count(t) for t in table.job_types()])
    assert counts.min() > 0.8 * len(single) / 26 and counts.max() < 1.2 * len(single) / 26


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    num_jobs=st.integers(1, 80),
    jobs_per_hour=st.one_of(st.none(), st.floats(0.05, 500)),
    mix=st.sampled_from(["single", "multiple", {1: 0.5, 8: 0.5}, {2: 1.0}]),
    subset=st.one_of(st.none(), st.sets(st.integers(0, 25), min_size=6)),
)
def test_generated_jobs_invariants(seed, num_jobs, jobs_per_hour, mix, subset) -> None:
    table = ThroughputTable.bundled("simulation")
    types = None if subset is None else [table.job_types()[i] for i in sorted(subset)]
    try:
        jobs = generate_gavel_jobs(
            table,
            num_jobs=num_jobs,
            jobs_per_hour=jobs_per_hour,
            seed=seed,
            scale_factors=mix,
            job_types=types,
        )
    except InputError as err:
        # Only possible when the subset has no distributable type for a drawn-from scale factor.
        assert err.where == "scale_factors"
        assert not any(table.has(t, 2) for t in types)
        return
    assert len(jobs) == num_jobs
    allowed = {"single": {1}, "multiple": {1, 2, 4, 8}}.get(mix) if isinstance(mix, str) else set(mix)
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    for j in jobs:
        assert j.scale_factor in allowed
        assert j.total_steps > 0
        assert types is None or j.job_type in types
        assert table.has(j.job_type, j.scale_factor)
        assert table.isolated(j.job_type, j.scale_factor, "v100") > 0
        assert j.priority_weight == 1.0 and j.slo is None and math.isfinite(j.arrival_s)


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"job_types": ["GPT-9"]}, "job_types"),
        ({"job_types": []}, "job_types"),
        ({"job_types": ["A3C", "CycleGAN"], "scale_factors": "multiple"}, "scale_factors"),
        ({"scale_factors": {1: 0.5, 2: 0.4}}, "scale_factors"),
        ({"scale_factors": {0: 1.0}}, "scale_factors"),
        ({"scale_factors": "many"}, "scale_factors"),
        ({"num_jobs": 0}, "num_jobs"),
        ({"jobs_per_hour": 0.0}, "jobs_per_hour"),
        ({"duration": (1, -2)}, "duration"),
        ({"duration": "gandiva"}, "duration"),
        ({"reference_worker": "tpu"}, "reference_worker"),
    ],
)
def test_generator_rejects_bad_settings(table: ThroughputTable, kwargs: dict, where: str) -> None:
    args = {"num_jobs": 10, "jobs_per_hour": 1.0, "seed": 0} | kwargs
    with pytest.raises(InputError) as err:
        generate_gavel_jobs(table, **args)
    assert err.value.where == where


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    short=st.integers(1, 60),
    extra=st.integers(1, 200),
    jobs_per_hour=st.sampled_from([None, 0.5, 6.0]),
    scale_factors=st.sampled_from(["single", "multiple"]),
    duration=st.sampled_from(["philly", (0.5, 1.0, 2.0, 4.0, 8.0)]),
    flags=st.tuples(st.booleans(), st.booleans()),
)
def test_generated_streams_are_prefix_stable(
    seed: int,
    short: int,
    extra: int,
    jobs_per_hour: float | None,
    scale_factors: str,
    duration: object,
    flags: tuple[bool, bool],
) -> None:
    # A longer trace extends a shorter one: job i is the same whatever num_jobs is.
    table = ThroughputTable.bundled("simulation")

    def jobs(n: int) -> list[TraceJob]:
        return generate_gavel_jobs(
            table,
            num_jobs=n,
            jobs_per_hour=jobs_per_hour,
            seed=seed,
            scale_factors=scale_factors,
            priorities=flags[0],
            slos=flags[1],
            duration=duration,
        )

    assert jobs(short + extra)[:short] == jobs(short)
