"""The real scheduler's journal: what a run has done so far, rewritten atomically after every round.

A scheduler killed part-way is started again with ``--resume``: it reads the journal and continues from
its last round. Every job continues from its last checkpoint, so the steps a round credited after it
(made in memory by a renewed lease when the scheduler died) are taken back, as for a process lost
mid-run; the clock continues where the journal stopped (the time the scheduler was down is not counted).
What the policy learned (measured throughputs, each job's history of rounds) starts afresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustertwin.atomic import write_text
from clustertwin.errors import InputError

NAME = "journal.json"


@dataclass(frozen=True)
class Journal:
    folder: Path

    @property
    def path(self) -> Path:
        return self.folder / NAME

    def exists(self) -> bool:
        return self.path.is_file()

    def write(self, state: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_text(self.path, json.dumps(state, default=float))

    def read(self) -> dict[str, Any]:
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError(str(self.path), f"cannot read the journal: {err}") from None
        # JSON keys are strings; the run's maps are by job id
        for name in ("known", "saved", "completion", "first_start", "tries", "failed", "last_failure"):
            state[name] = {int(k): v for k, v in state.get(name, {}).items()}
        return state
