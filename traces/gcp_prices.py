"""GCP preemptible GPU prices: the probing logs of the public training_on_a_dime repository (provenance:
``data/cloud/PROVENANCE.md``).

One file is one probing round; its name is the round's UTC time (``2020-02-26T17-03-53.000Z.out``, ``:``
written ``-``), optionally after a prefix ending in ``_``. Each line is a granted request::

    Zone: us-west1-b, GPU type: nvidia-tesla-v100, Number of GPUs: 1, Price per hour: $0.851

GCP's preemptible prices are fixed, not a market: the probing script wrote ``N × list price × 1.15``
(``GCP_HOST_ALLOWANCE``, its allowance for the VM hosting the GPUs), so ``gpu_price`` divides it out to
the per-GPU list price. A malformed line is an :class:`InputError` naming ``file:line``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from clustertwin.traces.files import read_text

from clustertwin.errors import InputError

CLOUD_DIR = Path(__file__).resolve().parent / "data" / "cloud"
BUNDLED_GCP_PREEMPTIBLE = CLOUD_DIR / "gcp_preemptible_2020-02-26T17-03-53.000Z.out"
GCP_HOST_ALLOWANCE = 1.15

_LINE = re.compile(
    r"^Zone: (?P<zone>[a-z0-9-]+), GPU type: (?P<gpu>[A-Za-z0-9-]+), "
    r"Number of GPUs: (?P<n>\S+), Price per hour: \$(?P<price>\S+)$"
)
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2})-(\d{2})-(\d{2}(?:\.\d+)?Z)")


@dataclass(frozen=True)
class GcpOffer:
    """One granted preemptible request: zone, GPU type (``V100``), GPU count and the logged price."""

    timestamp: pd.Timestamp
    zone: str
    gpu_type: str
    gpus: int
    price: float  # USD per hour for the whole request, as logged

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]

    @property
    def gpu_price(self) -> float:
        """The per-GPU list price the logged price was computed from."""
        return self.price / (self.gpus * GCP_HOST_ALLOWANCE)


def load_gcp_preemptible(path: str | Path = BUNDLED_GCP_PREEMPTIBLE) -> list[GcpOffer]:
    """Every granted request of one probing round, in file order."""
    path = Path(path)
    stamp = _STAMP.search(path.name)
    if stamp is None:
        raise InputError(str(path), "the file name must hold the round's time, e.g. 2020-02-26T17-03-53.000Z")
    when = pd.Timestamp(f"{stamp.group(1)}:{stamp.group(2)}:{stamp.group(3)}").tz_convert("UTC")
    offers = []
    for lineno, raw in enumerate(read_text(path).splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        m = _LINE.match(line)
        where = f"{path}:{lineno}"
        if m is None:
            raise InputError(
                where,
                "expected 'Zone: Z, GPU type: T, Number of GPUs: N, Price per hour: $X', got " + repr(line),
            )
        try:
            gpus = int(m["n"])
        except ValueError:
            raise InputError(f"{where}: Number of GPUs", f"not an integer: {m['n']!r}") from None
        if gpus < 1:
            raise InputError(f"{where}: Number of GPUs", f"must be >= 1, got {gpus}")
        try:
            price = float(m["price"])
        except ValueError:
            raise InputError(f"{where}: Price per hour", f"not a number: {m['price']!r}") from None
        if not math.isfinite(price) or price <= 0:
            raise InputError(f"{where}: Price per hour", f"must be a finite number > 0, got {m['price']!r}")
        gpu = m["gpu"].removeprefix("nvidia-tesla-").upper()
        offers.append(GcpOffer(when, m["zone"], gpu, gpus, price))
    if not offers:
        raise InputError(str(path), "no offers")
    return offers
