"""Paths to the public data shipped inside the package (provenance and licence sit next to each file)."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"

# Gavel (stanford-futuredata/gavel @ c4fa400, MIT): see data/gavel/PROVENANCE.md.
GAVEL_DIR = DATA_DIR / "gavel"
GAVEL_SIMULATION_THROUGHPUTS = GAVEL_DIR / "simulation_throughputs.json"
GAVEL_PHYSICAL_THROUGHPUTS = GAVEL_DIR / "physical_cluster_throughputs.json"
GAVEL_JOB_TYPES = GAVEL_DIR / "job_types.csv"
GAVEL_PHYSICAL_TRACES = GAVEL_DIR / "traces" / "physical_cluster"
