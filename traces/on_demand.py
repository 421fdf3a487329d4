"""On-demand price tables: ``instance_type,vcpus,gpus,price`` (USD per instance-hour), one row per type.

The bundled ``data/spot/on_demand_us-east-1.csv`` holds AWS's public Linux on-demand list prices for
us-east-1 (unchanged from 2017 through 2020 for these types); see ``data/spot/README.md``.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from clustertwin.traces.spot_prices import SPOT_DIR

from clustertwin.errors import InputError

BUNDLED_ON_DEMAND = SPOT_DIR / "on_demand_us-east-1.csv"
_HEADER = ("instance_type", "vcpus", "gpus", "price")


@dataclass(frozen=True)
class InstanceType:
    """One instance type: its size and on-demand price ($/h)."""

    name: str
    vcpus: int
    gpus: int
    on_demand_price: float


def load_on_demand(path: str | Path = BUNDLED_ON_DEMAND) -> dict[str, InstanceType]:
    """Read an on-demand table; a bad value raises InputError naming ``file:line: column``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(str(path), f"cannot read: {err.strerror or err}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = tuple(h.strip() for h in next(reader, ()))
    if header != _HEADER:
        raise InputError(f"{path}:1", f"expected header {','.join(_HEADER)}, got {','.join(header)!r}")
    table: dict[str, InstanceType] = {}
    for cells in reader:
        if not cells:
            continue
        where = f"{path}:{reader.line_num}"
        if len(cells) != len(_HEADER):
            raise InputError(where, f"expected {len(_HEADER)} columns, found {len(cells)}")
        name = cells[0].strip()
        if not name:
            raise InputError(f"{where}: column instance_type", "empty value")
        if name in table:
            raise InputError(f"{where}: column instance_type", f"{name} is listed twice")
        ints = []
        for col, cell in zip(("vcpus", "gpus"), cells[1:3], strict=True):
            try:
                value = int(cell)
            except ValueError:
                raise InputError(f"{where}: column {col}", f"not an integer: {cell!r}") from None
            if value < 0:
                raise InputError(f"{where}: column {col}", f"must be >= 0, got {value}")
            ints.append(value)
        try:
            price = float(cells[3])
        except ValueError:
            raise InputError(f"{where}: column price", f"not a number: {cells[3]!r}") from None
        if not math.isfinite(price) or price <= 0:
            raise InputError(f"{where}: column price", f"an on-demand price must be > 0, got {cells[3]!r}")
        table[name] = InstanceType(name, ints[0], ints[1], price)
    if not table:
        raise InputError(str(path), "no instance types")
    return table
