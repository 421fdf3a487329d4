"""One result shape for every ``clustertwin reproduce NAME``: the claim row, ``<out>/claims.json``, the
printed table, the closing summary line and the exit status they decide.

A row is one number of ours set beside one of a paper's. It *holds* when ours lies in its acceptance
band (both ends included); a row without a band is reported only (``holds`` is None). Only *gated* rows
decide the exit status; a checked row that is not gated is printed and saved, marked "(not gated)". A
gated row that does not hold must say why (``why``): building one without is a programming error.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clustertwin.atomic import write_json, write_text

EXIT_HOLD = 0  # every gated claim holds
EXIT_MISS = 1  # a gated claim does not hold (2, bad input, is the command line's)
CLAIMS_FILE = "claims.json"


@dataclass(frozen=True)
class ClaimRow:
    id: str
    claim: str
    source: str  # where the paper says it: section, figure, table, equation
    paper: str | float  # the paper's value, as it gives it
    ours: float
    accept: tuple[float, float] | None  # ours must lie in [low, high]; None: reported only
    fmt: str = field(default="{:.2f}", compare=False)  # how ours and the band print (not saved)
    gated: bool = True  # decides the exit status; a row without a band never does
    why: str = ""  # why ours may miss the paper's value; never empty on a gated row that fails
    per_seed: tuple[float, ...] | None = None  # ours per seed, when ours is a mean over seeds

    def __post_init__(self) -> None:
        if self.accept is None:
            object.__setattr__(self, "gated", False)
        elif not self.accept[0] <= self.accept[1]:
            raise ValueError(
                f"claim {self.id}: accept must be [low, high] with low <= high, got {self.accept}"
            )
        if self.gated and self.holds is False and not self.why.strip():
            raise ValueError(f"claim {self.id}: a gated claim that does not hold needs a why")

    @property
    def holds(self) -> bool | None:
        if self.accept is None:
            return None
        return bool(self.accept[0] <= self.ours <= self.accept[1])

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "claim": self.claim,
            "source": self.source,
            "paper": self.paper,
            "ours": self.ours,
            "per_seed": list(self.per_seed) if self.per_seed is not None else None,
            "accept": list(self.accept) if self.accept is not None else None,
            "holds": self.holds,
            "gated": self.gated,
            "why": self.why,
        }


def exit_status(rows: Sequence[ClaimRow]) -> int:
    return EXIT_HOLD if all(r.holds for r in rows if r.gated) else EXIT_MISS


def summary_line(rows: Sequence[ClaimRow]) -> str:
    """``4 of 5 gated claims hold; does not reproduce: makespan-static — <why>``."""
    gated = [r for r in rows if r.gated]
    missed = [r for r in gated if not r.holds]
    line = f"{len(gated) - len(missed)} of {len(gated)} gated claims hold"
    if missed:
        line += "; does not reproduce: " + "; ".join(f"{r.id} — {r.why}" for r in missed)
    return line


def write_claims(
    out: Path, name: str, paper: str, quick: bool, seeds: Sequence[int], rows: Sequence[ClaimRow]
) -> Path:
    """Save the rows atomically as ``<out>/claims.json``."""
    out.mkdir(parents=True, exist_ok=True)
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"claim set {name}: ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    data = {
        "name": name,
        "paper": paper,
        "quick": quick,
        "seeds": list(seeds),
        "summary": summary_line(rows),
        "claims": [r.to_json() for r in rows],
    }
    return write_json(out / CLAIMS_FILE, data)


def print_claims(rows: Sequence[ClaimRow], title: str, name: str) -> None:
    """The claims table on stdout, then its footnote when some checked row is not gated."""
    table = Table(title=escape(title))
    for column in ("claim", "paper", "ours", "accept", "holds"):
        table.add_column(column, justify="left" if column == "claim" else "right")
    for r in rows:
        ours = _value(r.ours, r.fmt)
        if r.per_seed is not None and len(r.per_seed) > 1:
            if all(math.isfinite(v) for v in r.per_seed):
                ours += f" ± {r.fmt.format(statistics.stdev(r.per_seed))}"
            else:  # a spread means nothing beside an unbounded seed: show each
                ours += " (" + ", ".join(_value(v, r.fmt) for v in r.per_seed) + ")"
        paper = r.fmt.format(r.paper) if isinstance(r.paper, int | float) else r.paper
        holds = "-" if r.holds is None else ("yes" if r.holds else "NO") + ("" if r.gated else " (not gated)")
        # escape: a source such as "[[Proteus] §5]" would otherwise be read as rich markup and vanish
        cells = (f"{r.id}: {r.claim} [{r.source}]", paper, ours, _band(r), holds)
        table.add_row(*(escape(c) for c in cells))
    Console(width=max(Console().width, 160), file=sys.stdout).print(table)
    if any(r.holds is not None and not r.gated for r in rows):
        print(
            "(not gated): checked and saved, but does not decide the exit status;"
            f" docs/algorithms/{name}.md says why"
        )
        missed: dict[str, list[str]] = {}  # one line per reason, naming the rows it covers
        for r in rows:
            if r.holds is False and not r.gated:
                missed.setdefault(r.why or "no reason given", []).append(r.id)
        for why, ids in missed.items():
            print(f"  {', '.join(ids)}: {why}")


def markdown_section(data: dict[str, object]) -> str:
    """A saved ``claims.json`` as a Markdown section: its summary line and one table row per claim."""
    claims = data["claims"]
    assert isinstance(claims, list)
    quick = " (--quick)" if data.get("quick") else ""
    lines = [
        f"## {data['name']}{quick}",
        "",
        f"{data['paper']}. Seeds {data.get('seeds')}. **{data['summary']}**",
        "",
        "| id | claim | source | paper | ours | accept | holds | why it may differ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        ours, paper = _number(c["ours"]), _number(c["paper"])
        accept = "reported" if c["accept"] is None else f"[{c['accept'][0]:.4g}, {c['accept'][1]:.4g}]"
        holds = "-" if c["holds"] is None else ("yes" if c["holds"] else "**no**")
        if not c["gated"] and c["holds"] is not None:
            holds += " (not gated)"
        cells = (c["id"], c["claim"], c["source"], paper, ours, accept, holds, c["why"] or "")
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return "\n".join(lines) + "\n"


def update_markdown(path: Path, data: dict[str, object]) -> Path:
    """Put the claim set's section into the Markdown file ``path`` (created if missing), replacing the
    section an earlier run of the same set wrote there; the rest of the file is kept."""
    start, end = f"<!-- reproduce {data['name']} -->", f"<!-- /reproduce {data['name']} -->"
    section = f"{start}\n{markdown_section(data)}{end}\n"
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Reproduction\n\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    return write_text(path, text)


def _number(value: object) -> str:
    """A saved number as the Markdown table shows it; NaN (not measured, or not judged here) as "-"."""
    if isinstance(value, int | float):
        return _value(value, "{:.4g}")
    return str(value)


def _value(value: float, fmt: str) -> str:
    """``value`` in ``fmt``; NaN (not measured, not judged here, or over a saturated run) as "-", an
    unbounded value (a ratio over a saturated baseline) as "∞"."""
    if math.isnan(value):
        return "-"
    return "∞" if math.isinf(value) else fmt.format(value)


def _band(row: ClaimRow) -> str:
    if row.accept is None:
        return "reported"
    low, high = row.accept
    if math.isinf(high):
        return f">= {row.fmt.format(low)}"
    if math.isinf(low):
        return f"<= {row.fmt.format(high)}"
    return f"[{row.fmt.format(low)}, {row.fmt.format(high)}]"


def report(
    name: str,
    paper: str,
    quick: bool,
    seeds: Sequence[int],
    out: Path,
    rows: Sequence[ClaimRow],
    title: str = "",
) -> int:
    """Save, print the table and the summary line; return the exit status (0: every gated claim holds)."""
    path = write_claims(out, name, paper, quick, seeds, rows)
    print_claims(rows, title or f"{name} claims (seeds {list(seeds)}){' (quick)' if quick else ''}", name)
    print(f"results: {path}")
    print(summary_line(rows))
    return exit_status(rows)
