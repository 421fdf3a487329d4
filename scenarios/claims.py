"""Paper claims as data: what ``clustertwin reproduce NAME`` runs and checks.

A claims file (``scenarios/claims/<name>.yaml``) lists claims. Each names a scenario file, the overrides
that make its *treatment* and its *baseline*, a metric, and the paper's value of the ratio
``metric(baseline) / metric(treatment)`` (e.g. 3.5 for "3.5x lower average JCT"), where the paper says it
(``source``) and why ours may miss it (``why``, printed when the claim does not hold). Ours is that ratio
averaged over seeds; the claim holds when it lies in ``accept``. A ``quick`` variant adds overrides that
shrink the run for CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clustertwin.errors import InputError

CLAIMS_DIR = Path(__file__).parent / "claims"


class Variant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    set: list[str] = Field(default_factory=list)  # --set overrides on top of the claim's
    seeds: list[int] = Field(default_factory=lambda: [0])


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    claim: str
    source: Annotated[str, Field(min_length=1)]  # section / figure of the paper
    paper: float
    scenario: str  # relative to scenarios/
    metric: str  # a key of the run's flat metrics
    treatment: list[str] = Field(default_factory=list)
    baseline: list[str] = Field(default_factory=list)
    accept: tuple[float, float]  # ours must lie in [low, high]
    why: Annotated[str, Field(min_length=1)]  # why ours may miss the paper's value: printed when it does
    gated: bool = True  # false: checked and printed, but a miss (explained by ``why``) does not fail the set
    full: Variant = Variant(seeds=[0, 1, 2])
    quick: Variant = Variant()

    @model_validator(mode="after")
    def _band(self) -> Claim:
        low, high = self.accept
        if not 0 <= low < high:
            raise ValueError(f"accept must be [low, high] with 0 <= low < high, got {list(self.accept)}")
        return self

    def scenario_path(self) -> Path:
        return Path(__file__).parent / self.scenario


class ClaimSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    paper: str
    claims: list[Claim]


def claim_set_names() -> list[str]:
    """The claim sets that are data files (other kinds' claims, not ratios of two runs, live in code)."""
    return sorted(p.stem for p in CLAIMS_DIR.glob("*.yaml"))


def load_claims(name: str) -> ClaimSet:
    path = CLAIMS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"reproduce {name}", f"no such claim set; known: {', '.join(claim_set_names())}")
    try:
        return ClaimSet.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as err:
        raise InputError(str(path), str(err)) from err
