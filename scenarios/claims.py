"""Paper claims as data: what ``clustertwin reproduce NAME`` runs and checks.

A claims file (``scenarios/claims/<name>.yaml``) lists claims. Each says where the paper says it
(``source``), the paper's value, why ours may miss it (``why``, printed when the claim does not hold) and
what ours is (``measure``):

- ``ratio`` (the default): a scenario file, the overrides that make its *treatment* and its *baseline*,
  and a metric; ours is ``metric(baseline) / metric(treatment)`` (e.g. 3.5 for "3.5x lower average
  JCT"), averaged over seeds;
- ``value``: the metric of the treatment run itself (e.g. the fraction of jobs that miss their SLO);
- ``computed``: a named measure (``metric``) with arguments (``args``) that reads recorded runs under
  ``results/`` or evaluates policies directly, with no simulation;
- ``unmeasured``: the data to judge it does not exist; reported with its why, never gated.

The claim holds when ours lies in ``accept``; without ``accept`` it is reported only. ``show`` names
metrics of the treatment run printed beside the claim. A ``quick`` variant adds overrides that shrink
the run for CI; its ``note`` (printed beside the claim) says how the quick point departs from the
claim's stated setup. A claim whose physics no lighter point keeps says so in ``quick.skip``: ``--quick``
reports it as not judged, with that reason; the full run still runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clustertwin.errors import InputError

CLAIMS_DIR = Path(__file__).parent / "claims"


class Variant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    set: list[str] = Field(default_factory=list)  # --set overrides on top of the claim's
    seeds: list[int] = Field(default_factory=lambda: [0])
    note: str = ""  # how this variant's point departs from the claim's stated setup
    skip: str = ""  # why this variant cannot judge the claim honestly: it is reported, not judged


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    claim: str
    source: Annotated[str, Field(min_length=1)]  # section / figure of the paper
    paper: float | str  # a number, or the paper's words ("< 3%") when ours is not on its scale
    measure: Literal["ratio", "value", "computed", "unmeasured"] = "ratio"
    scenario: str | None = None  # relative to scenarios/ (ratio and value)
    metric: str = ""  # a key of the run's flat metrics, or the computed measure's name
    args: dict[str, Any] = Field(default_factory=dict)  # the computed measure's arguments
    treatment: list[str] = Field(default_factory=list)
    baseline: list[str] = Field(default_factory=list)
    accept: tuple[float, float] | None = None  # ours must lie in [low, high]; None: reported only
    why: Annotated[str, Field(min_length=1)]  # why ours may miss the paper's value: printed when it does
    gated: bool = True  # false: checked and printed, but a miss (explained by ``why``) does not fail the set
    show: list[str] = Field(default_factory=list)  # treatment metrics printed beside the claim
    full: Variant = Variant(seeds=[0, 1, 2])
    quick: Variant = Variant()

    @model_validator(mode="after")
    def _band(self) -> Claim:
        if self.accept is not None:
            low, high = self.accept
            if not (low < high and (low >= 0 or self.measure != "ratio")):
                raise ValueError(
                    "accept must be [low, high] with low < high (0 <= low for a ratio),"
                    f" got {list(self.accept)}"
                )
        if self.measure in ("ratio", "value") and (self.scenario is None or not self.metric):
            raise ValueError(f"a {self.measure} claim needs a scenario and a metric")
        if self.measure == "computed" and not self.metric:
            raise ValueError("a computed claim names its measure in metric")
        if self.measure == "unmeasured" and self.accept is not None:
            raise ValueError("an unmeasured claim has no acceptance band: it is reported with its why")
        if self.full.skip:
            raise ValueError("the full run judges every claim it can measure: full.skip is for quick only")
        return self

    @property
    def runs(self) -> bool:
        """Whether the claim needs simulations (ratio and value claims)."""
        return self.measure in ("ratio", "value")

    def scenario_path(self) -> Path:
        assert self.scenario is not None
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


class FigureClaim(BaseModel):
    """A claim of a set whose measures are computed in code from many runs (PSLD's Cluster-B figures, the
    cloud what-ifs): ``metric`` names the figure ours is read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    claim: str
    source: Annotated[str, Field(min_length=1)]
    paper: float | str
    metric: str
    accept: tuple[float, float] | None
    gated: bool
    fmt: str = "{:.2f}"
    why: Annotated[str, Field(min_length=1)]


Schema = TypeVar("Schema", bound=BaseModel)


def load_claim_file(path: Path, schema: type[Schema]) -> Schema:
    """A claims file validated against ``schema``; any fault is an input error naming the file."""
    try:
        return schema.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except OSError as err:
        raise InputError(str(path), f"cannot read: {err}") from None
    except (yaml.YAMLError, ValidationError) as err:
        raise InputError(str(path), str(err)) from None
