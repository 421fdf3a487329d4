"""Profiling in rounds: the deal of pairs into rounds, concurrent measurement, averaging, bad input."""

from __future__ import annotations

import csv
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from clustertwin.cli import main  # noqa: E402
from runtime import profile, profile_rounds  # noqa: E402
from runtime.profile_rounds import deal, round_plan  # noqa: E402
from scenarios.errors import InputError  # noqa: E402
from tests.test_profile import LM, RESNET, write_scenario  # noqa: E402


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[str, int], list[tuple[str, int, str]], int]:
    slots = {f"w{i}": draw(st.integers(1, 5)) for i in range(draw(st.integers(1, 3)))}
    pairs = []
    for worker_type, count in slots.items():
        for j in range(draw(st.integers(1, 6))):
            pairs.append((f"job{j}", draw(st.integers(1, count)), worker_type))
    return slots, pairs, draw(st.integers(1, 12))


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(0, 3))
def test_deal_never_overfills_a_type_and_keeps_counts_balanced(cluster, seed: int) -> None:
    slots, pairs, rounds = cluster
    schedule = deal(slots, pairs, rounds, seed)
    assert len(schedule) == rounds
    for measured in schedule:
        used = Counter()
        for _job, sf, worker_type in measured:
            used[worker_type] += sf
        assert all(used[w] <= slots[w] for w in used)  # capacity never exceeded
        # A round leaves no slot idle that some pair of that type could have filled.
        for worker_type, count in slots.items():
            smallest = min(sf for _, sf, w in pairs if w == worker_type)
            assert count - used[worker_type] < smallest
    counts = Counter(pair for measured in schedule for pair in measured)
    for worker_type in slots:
        own = [counts[p] for p in pairs if p[2] == worker_type]
        if all(sf == 1 for _, sf, w in pairs if w == worker_type):
            assert max(own) - min(own) <= 1  # every pair of a one-slot type equally often, within one


def test_round_plan_refuses_too_few_rounds_and_names_enough(tmp_path: Path) -> None:
    scenario = profile.load_for_profiling(write_scenario(tmp_path))  # 2 job types, 1 slot per type
    with pytest.raises(InputError, match="needs at least 2") as err:
        round_plan(scenario, 1)
    assert err.value.where == "--rounds"
    with pytest.raises(InputError, match="at least one round"):
        round_plan(scenario, 0)
    schedule = round_plan(scenario, 4)
    counts = Counter(pair for measured in schedule for pair in measured)
    assert counts == {(job, 1, worker): 2 for job in (RESNET, LM) for worker in ("fast", "slow")}
    # Each round measures one job on each worker type, and the mixes differ between rounds.
    assert all(sorted(w for *_, w in measured) == ["fast", "slow"] for measured in schedule)


def test_a_round_measures_its_pairs_at_once_and_rows_are_sample_means(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake measurements that wait for each other: a round whose pairs ran one after another would time
    out at the barrier. Each sample's step time is its round number, so the mean is checkable."""
    scenario = profile.load_for_profiling(write_scenario(tmp_path))
    barrier = threading.Barrier(2, timeout=10)
    calls: list[tuple[str, str, Path]] = []

    def fake_measure(
        job_type, scale_factor, worker_type, worker, *, workdir: Path, **_
    ) -> profile.ProfileRow:
        barrier.wait()
        calls.append((job_type, worker_type, workdir))
        step_s = 1.0 + int(workdir.parent.name.removeprefix("round"))
        return profile.ProfileRow(job_type, scale_factor, worker_type, 1 / step_s, 0.1, 0.2, 3.0, step_s)

    monkeypatch.setattr(profile_rounds, "measure", fake_measure)
    rows = profile_rounds.profile_in_rounds(scenario, rounds=4, seconds=1.0, workdir=tmp_path / "w")
    assert len(calls) == 8 and len({w for *_, w in calls}) == 8  # every sample in its own folder
    schedule = round_plan(scenario, 4)
    for row in rows:
        pair = (row.job_type, row.scale_factor, row.worker_type)
        expected = [1.0 + r for r, measured in enumerate(schedule) if pair in measured]
        assert row.step_s == pytest.approx(sum(expected) / len(expected))
        assert row.throughput == pytest.approx(1 / row.step_s)
        assert row.mode == "rounds" and row.load_s == pytest.approx(0.1)
    assert [(r.job_type, r.worker_type) for r in rows] == [
        (j, w) for j in (RESNET, LM) for w in ("fast", "slow")
    ]


def test_a_failed_measurement_fails_the_profile_after_its_round_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = profile.load_for_profiling(write_scenario(tmp_path))
    finished: list[str] = []

    def fake_measure(job_type, scale_factor, worker_type, worker, **_) -> profile.ProfileRow:
        if worker_type == "slow":
            raise profile.ProfileError(f"{job_type} on slow died")
        time.sleep(0.2)  # the other job of the round is still training when the failure is known
        finished.append(worker_type)
        return profile.ProfileRow(job_type, scale_factor, worker_type, 1.0, 0.1, 0.2, 3.0, 1.0)

    monkeypatch.setattr(profile_rounds, "measure", fake_measure)
    with pytest.raises(profile.ProfileError, match="on slow died"):
        profile_rounds.profile_in_rounds(scenario, rounds=2, seconds=1.0, workdir=tmp_path / "w")
    assert finished == ["fast"]  # waited for, and no second round started


def test_cli_profile_in_rounds_writes_the_tables_and_refuses_bad_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_measure(job_type, scale_factor, worker_type, worker, **_) -> profile.ProfileRow:
        rate = 10.0 / worker.slowdown
        return profile.ProfileRow(job_type, scale_factor, worker_type, rate, 0.01, 0.02, 1.5, 1 / rate)

    monkeypatch.setattr(profile_rounds, "measure", fake_measure)
    path = write_scenario(tmp_path)
    out = tmp_path / "p.throughputs.csv"
    assert main(["profile", str(path), "--rounds", "2", "--out", str(out)]) == 0
    with (tmp_path / "p.overheads.csv").open() as f:
        modes = {row["worker_type"]: row["mode"] for row in csv.DictReader(f)}
    assert modes == {"fast": "rounds", "slow": "rounds"}
    assert main(["profile", str(path), "--rounds", "1", "--out", str(out)]) == 2
    with pytest.raises(SystemExit):  # argparse: the two load modes exclude each other
        main(["profile", str(path), "--rounds", "2", "--under-load"])


def test_profile_in_rounds_on_real_cpu_workers(tmp_path: Path) -> None:
    """Two real job processes train at once per round; the table has every pair, slow below fast."""
    scenario = profile.load_for_profiling(write_scenario(tmp_path))
    rows = profile_rounds.profile_in_rounds(scenario, rounds=2, steps=4, workdir=tmp_path / "w")
    rates = {(r.job_type, r.worker_type): r.throughput for r in rows}
    assert set(rates) == {(j, w) for j in (RESNET, LM) for w in ("fast", "slow")}
    for job in (RESNET, LM):
        assert rates[(job, "fast")] > rates[(job, "slow")] > 0  # slow is slowed 3x
