"""Field checks shared by every schema that replays a spot price trace (``kind: spot`` and Gavel's
``market:`` section), in a module of their own so that neither schema imports the other."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

# Bundled trace names (traces/spot_prices.py BUNDLED_SPOT_TRACES); anything else is a path.
BUNDLED_TRACE_NAMES = ("aws-p2-p3-us-east-1-2020",)


def iso_text(value: object) -> object:
    """YAML reads an unquoted 2020-02-20T00:00:00Z as a datetime; keep it as the ISO text it was."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def price_trace(value: str) -> str:
    """A bundled trace name, or a price file that exists."""
    if value not in BUNDLED_TRACE_NAMES and not Path(value).is_file():
        raise ValueError(f"expected {' or '.join(BUNDLED_TRACE_NAMES)} or a price file; not found: {value}")
    return value


def on_demand_table(value: str) -> str:
    """``bundled``, or an on-demand price CSV that exists."""
    if value != "bundled" and not Path(value).is_file():
        raise ValueError(f"expected bundled or an on-demand price CSV; not found: {value}")
    return value
