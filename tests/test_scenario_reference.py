"""The scenario reference page is generated from the schemas and kept up to date."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, PositiveFloat

from clustertwin import scenario_reference as ref


def test_the_committed_page_is_the_generated_one() -> None:
    assert ref.PAGE.read_text(encoding="utf-8") == ref.render(ref.builtin_schemas()), (
        "docs/scenarios.md is stale: run python -m clustertwin.scenario_reference --write"
    )


class Inner(BaseModel):
    """A nested section."""

    rate: PositiveFloat = 2.0  # per hour


class Toy(BaseModel):
    """A toy scenario."""

    kind: Literal["toy"]
    name: str
    # how fast it goes,
    # over two lines
    speed: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    mode: Literal["a", "b"] = "a"
    parts: dict[str, Inner] = Field(default_factory=dict)
    inner: Inner | None = None


def test_every_field_is_listed_with_type_default_and_its_comment() -> None:
    page = ref.render({"toy": Toy})
    assert "## `kind: toy`\nA toy scenario." in page
    assert "| `name` | text | required |  |" in page
    assert "| `speed` | number (≥ 0.0, ≤ 1.0) | 0.5 | how fast it goes, over two lines |" in page
    assert '| `mode` | a \\| b | "a" |  |' in page
    assert "| `parts.<name>.rate` | number (> 0) | 2.0 | per hour |" in page
    assert "| `inner` | section or null | null | A nested section. |" in page
    assert "| `inner.rate` |" in page
    assert "`kind`" not in page.split("## `kind: toy`")[1]
