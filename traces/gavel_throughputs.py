"""Gavel's throughput table T: steps/s of each (job type, scale factor) on each accelerator type.

Source format: ``scheduler/simulation_throughputs.json`` of stanford-futuredata/gavel (commit c4fa400,
MIT), read by Gavel's ``utils.read_all_throughputs_json_v2``; data README §1.1 and notes 001 §1, §3::

    {worker_type: {"('Job type', sf)": {"null": isolated, "('Other', sf2)": [self, other], ...}}}

Values are training iterations per second of the whole job at that scale factor (number of GPUs). The
``"null"`` entry is the job alone; a partner entry gives both jobs' throughputs when they share the device
(space sharing). Gavel has a ``<type>_unconsolidated`` column per type for a distributed job whose workers
sit on different servers (one GPU per server); the plain column is the packed ("consolidated") placement.

A second, simpler form is a CSV with the header ``job_type,scale_factor,worker_type,throughput`` (isolated
throughputs only), which our profiling runs write.
"""

from __future__ import annotations

import ast
import csv
import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from clustertwin.traces import bundled
from clustertwin.traces.files import read_json, read_text

from clustertwin.errors import InputError

JobKey = tuple[str, int]

# Gavel fills its per-type queues V100, then P100, then K80 (notes 001 §1): the scheduler relies on
# this fastest-first order, so it is fixed here rather than taken from the file's key order.
_KNOWN_ORDER = ("v100", "p100", "k80")
_UNCONSOLIDATED = "_unconsolidated"
_CSV_COLUMNS = ("job_type", "scale_factor", "worker_type", "throughput")


class ThroughputTable:
    """Isolated and colocated throughputs, with a dense index for fast vectorised lookups.

    ``worker_types`` are the consolidated types: ``v100, p100, k80`` in that order when present, then any
    other type in file order. Unconsolidated lookups read ``<type>_unconsolidated`` and fall back to the
    consolidated value wherever that column (or the entry in it) is missing: Gavel's
    ``k80_unconsolidated`` lacks ResNet-50 batch 64/128 at scale factors 2-8, and our CSV tables have no
    unconsolidated columns at all. The fallback is optimistic, since consolidated is an upper bound.
    An absent entry reads as 0.0, the same as Gavel's "cannot run there" (e.g. an out-of-memory job).
    """

    def __init__(
        self,
        isolated: Mapping[str, Mapping[JobKey, float]],
        colocated: Mapping[str, Mapping[tuple[JobKey, JobKey], tuple[float, float]]] | None = None,
        *,
        source: str = "<table>",
    ) -> None:
        self.source = source
        consolidated = [wt for wt in isolated if not wt.endswith(_UNCONSOLIDATED)]
        for wt in isolated:
            base = wt.removesuffix(_UNCONSOLIDATED)
            if base != wt and base not in isolated:
                raise InputError(f"{source}: [{wt!r}]", f"no consolidated column {base!r} for this column")
        self._worker_types = tuple(
            [wt for wt in _KNOWN_ORDER if wt in isolated]
            + [wt for wt in consolidated if wt not in _KNOWN_ORDER]
        )
        self._col = {wt: j for j, wt in enumerate(self._worker_types)}

        self._row: dict[JobKey, int] = {}
        sfs: dict[str, set[int]] = {}
        for column in isolated.values():
            for key in column:
                if key not in self._row:
                    self._row[key] = len(self._row)
                    sfs.setdefault(key[0], set()).add(key[1])
        self._scale_factors = {job_type: tuple(sorted(s)) for job_type, s in sfs.items()}

        # One spare zero row and column: unknown keys and worker types index them, so a vectorised
        # lookup needs no branch.
        shape = (len(self._row) + 1, len(self._worker_types) + 1)
        cons = np.zeros(shape)
        for wt, j in self._col.items():
            for key, value in isolated[wt].items():
                cons[self._row[key], j] = value
        uncons = cons.copy()
        for wt, j in self._col.items():
            for key, value in isolated.get(wt + _UNCONSOLIDATED, {}).items():
                uncons[self._row[key], j] = value
        cons.setflags(write=False)
        uncons.setflags(write=False)
        self._dense = {True: cons, False: uncons}
        self._colocated = {wt: dict(pairs) for wt, pairs in (colocated or {}).items()}

    # ----------------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, path: str | Path) -> ThroughputTable:
        """Read a table, choosing the format by suffix: ``.json`` (Gavel) or ``.csv`` (isolated only)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".json":
            return cls.from_json(path)
        if suffix == ".csv":
            return cls.from_csv(path)
        raise InputError(str(path), "unknown throughput table format; expected a .json or .csv file")

    @classmethod
    def bundled(cls, which: Literal["simulation", "physical"] = "simulation") -> ThroughputTable:
        """Gavel's own tables: ``simulation`` for simulated clusters, ``physical`` for its 48-GPU testbed.

        The table is loaded once per process and shared; it is read-only.
        """
        if which not in ("simulation", "physical"):
            raise InputError(
                "throughput table", f"unknown bundled table {which!r}; use 'simulation' or 'physical'"
            )
        return _bundled(which)

    @classmethod
    def from_json(cls, path: str | Path) -> ThroughputTable:
        """Read Gavel's JSON schema; a malformed entry raises InputError naming the file and the key."""
        path = Path(path)
        raw = read_json(path)
        if not isinstance(raw, dict) or not raw:
            raise InputError(str(path), "expected a JSON object {worker_type: {job_key: {...}}}")

        keys: dict[str, JobKey] = {}

        def parse_key(text: str, where: str) -> JobKey:
            if text not in keys:
                keys[text] = _parse_job_key(text, where)
            return keys[text]

        isolated: dict[str, dict[JobKey, float]] = {}
        colocated: dict[str, dict[tuple[JobKey, JobKey], tuple[float, float]]] = {}
        for wt, rows in raw.items():
            if not isinstance(rows, dict):
                raise InputError(f"{path}: [{wt!r}]", "expected an object of job keys")
            iso = isolated[wt] = {}
            pairs = colocated[wt] = {}
            for key_text, entry in rows.items():
                where = f"{path}: [{wt!r}][{key_text!r}]"
                key = parse_key(key_text, where)
                if not isinstance(entry, dict) or "null" not in entry:
                    raise InputError(where, 'expected an object with a "null" (isolated throughput) entry')
                iso[key] = _rate(entry["null"], f'{where}["null"]')
                for other_text, both in entry.items():
                    if other_text == "null":
                        continue
                    pair_where = f"{where}[{other_text!r}]"
                    other = parse_key(other_text, pair_where)
                    if not isinstance(both, list) or len(both) != 2:
                        raise InputError(pair_where, "expected [this job's, other job's] throughputs")
                    pairs[(key, other)] = (_rate(both[0], pair_where), _rate(both[1], pair_where))
        return cls(isolated, colocated, source=str(path))

    @classmethod
    def from_csv(cls, path: str | Path) -> ThroughputTable:
        """Read ``job_type,scale_factor,worker_type,throughput`` rows (steps/s, isolated only)."""
        path = Path(path)
        isolated: dict[str, dict[JobKey, float]] = {}
        reader = csv.reader(read_text(path).splitlines())
        header = [h.strip() for h in next(reader, [])]
        if sorted(header) != sorted(_CSV_COLUMNS):
            raise InputError(f"{path}:1", f"header must name the columns {','.join(_CSV_COLUMNS)}")
        at = {name: header.index(name) for name in _CSV_COLUMNS}
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise InputError(f"{path}:{line}", f"expected {len(header)} columns, found {len(row)}")
            job_type = row[at["job_type"]].strip()
            worker_type = row[at["worker_type"]].strip()
            for name, value in (("job_type", job_type), ("worker_type", worker_type)):
                if not value:
                    raise InputError(f"{path}:{line}: column {name}", "empty")
            sf_text = row[at["scale_factor"]].strip()
            try:
                sf = int(sf_text)
            except ValueError:
                raise InputError(
                    f"{path}:{line}: column scale_factor", f"{sf_text!r} is not an integer"
                ) from None
            if sf < 1:
                raise InputError(f"{path}:{line}: column scale_factor", f"must be >= 1, got {sf}")
            tput_text = row[at["throughput"]].strip()
            try:
                tput = float(tput_text)
            except ValueError:
                raise InputError(
                    f"{path}:{line}: column throughput", f"{tput_text!r} is not a number"
                ) from None
            tput = _rate(tput, f"{path}:{line}: column throughput")
            column = isolated.setdefault(worker_type, {})
            if (job_type, sf) in column:
                raise InputError(f"{path}:{line}", f"duplicate entry for {(job_type, sf)} on {worker_type!r}")
            column[(job_type, sf)] = tput
        if not isolated:
            raise InputError(str(path), "no throughput rows")
        return cls(isolated, source=str(path))

    # ----------------------------------------------------------------------------------- queries
    @property
    def worker_types(self) -> tuple[str, ...]:
        """Consolidated accelerator types, fastest first for Gavel's (v100, p100, k80)."""
        return self._worker_types

    def job_types(self) -> tuple[str, ...]:
        """Every job type in the table, in file order."""
        return tuple(self._scale_factors)

    def scale_factors(self, job_type: str) -> tuple[int, ...]:
        """Scale factors the table lists for ``job_type`` (ascending; empty when the type is unknown)."""
        return self._scale_factors.get(job_type, ())

    def has(self, job_type: str, scale_factor: int) -> bool:
        """Whether any column lists ``(job_type, scale_factor)`` (its value may still be 0.0)."""
        return (job_type, scale_factor) in self._row

    def isolated(
        self, job_type: str, scale_factor: int, worker_type: str, consolidated: bool = True
    ) -> float:
        """Steps/s of the job alone on ``worker_type``; 0.0 when absent (see the class docstring)."""
        row = self._row.get((job_type, scale_factor))
        col = self._col.get(worker_type)
        if row is None or col is None:
            return 0.0
        return float(self._dense[consolidated][row, col])

    def isolated_matrix(
        self,
        job_keys: Sequence[JobKey],
        worker_types: Sequence[str] | None = None,
        consolidated: bool = True,
    ) -> np.ndarray:
        """Matrix (len(job_keys), len(worker_types)) of isolated steps/s; unknown keys or types give 0.0.

        ``worker_types`` defaults to :attr:`worker_types`. The result is a fresh, writable array.
        """
        dense = self._dense[consolidated]
        missing_row, missing_col = dense.shape[0] - 1, dense.shape[1] - 1
        row_of, col_of = self._row.get, self._col.get
        rows = np.fromiter((row_of(key, missing_row) for key in job_keys), dtype=np.intp, count=len(job_keys))
        types = self._worker_types if worker_types is None else worker_types
        cols = np.fromiter((col_of(wt, missing_col) for wt in types), dtype=np.intp, count=len(types))
        return dense[rows[:, None], cols[None, :]]

    def colocated(
        self, a: JobKey, b: JobKey, worker_type: str, consolidated: bool = True
    ) -> tuple[float, float] | None:
        """Steps/s of (a, b) when they share ``worker_type``, or None when the table has no such pair.

        Gavel profiles pairs with equal scale factors only. Unconsolidated lookups fall back to the
        consolidated pair like :meth:`isolated` does.
        """
        if not consolidated:
            pair = self._colocated.get(worker_type + _UNCONSOLIDATED, {}).get((a, b))
            if pair is not None:
                return pair
        return self._colocated.get(worker_type, {}).get((a, b))


@functools.cache
def _bundled(which: str) -> ThroughputTable:
    path = (
        bundled.GAVEL_SIMULATION_THROUGHPUTS if which == "simulation" else bundled.GAVEL_PHYSICAL_THROUGHPUTS
    )
    return ThroughputTable.from_json(path)


def _parse_job_key(text: str, where: str) -> JobKey:
    """Parse Gavel's ``str((job_type, scale_factor))``; literal_eval also handles names with quotes."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and value[0]
        and type(value[1]) is int
        and value[1] >= 1
    ):
        return value
    raise InputError(where, f"job key {text!r} is not of the form \"('Job type', scale_factor >= 1)\"")


def _rate(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputError(where, f"throughput must be a finite number >= 0, got {value!r}")
    return float(value)
