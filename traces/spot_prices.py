"""Spot-price history loaders: three public shapes into one canonical table.

Canonical table (one row per price *change*; the price holds until the next row of the same market):

==============  =======================  =====================================================
column          dtype                    meaning
==============  =======================  =====================================================
timestamp       datetime64[ns, UTC]      when the price took effect
region          str                      e.g. ``us-east-1`` (derived from the zone when absent)
zone            str                      availability zone: a name (``us-east-1c``) or an AZ id (``use1-az4``)
instance_type   str                      e.g. ``p3.2xlarge``
price           float64                  USD per instance-hour
==============  =======================  =====================================================

Rows are sorted by (timestamp, zone, instance_type). A market is one (instance_type, zone) pair.

Formats read (see ``/work/shared/data/README.md`` §3 for provenance of the examples):

* AWS ``aws ec2 describe-spot-price-history`` JSON: ``{"SpotPriceHistory": [{"Timestamp",
  "AvailabilityZone", "InstanceType", "ProductDescription", "SpotPrice"}, ...]}``.
* The public monthly archive (ericpauley/aws-spot-price-history): headerless TSV, columns
  ``az_id, instance_type, product_description, price, timestamp``, optionally Zstandard-compressed
  (``.zst``). Decompression uses pyarrow's zstd codec (pyarrow is already a dependency), falling back
  to the ``zstandard`` package.
* CSV with a header: the canonical columns above, the training_on_a_dime derived CSV
  (``timestamp_utc,region,availability_zone,instance_type,product_description,price_usd_per_hour``) or
  the ericpauley-derived CSV (``timestamp_utc,az_id,instance_type,price_usd_per_hour``).

Every malformed value raises :class:`InputError` naming ``file:line: column``. Only ``Linux/UNIX`` rows
are kept when a product description is present (other OSes are different markets with other prices).

Bad traces are errors or documented repairs, never a silently wrong price:

* **missing, empty, non-numeric, NaN, infinite or negative prices** (every format, JSON included) and
  missing or non-string JSON fields: :class:`InputError` naming ``file:line: column``.
* **unsorted rows**: repaired by sorting (input order never matters: AWS itself returns newest first).
* **duplicates**: several rows for one market (instance type, zone) at one instant with the *same* price
  are one price change written twice (overlapping AWS pages): the copies are dropped and a
  :class:`UserWarning` says how many and where the first one was (``table.attrs["repairs"]`` too). The
  same instant with *different* prices is an :class:`InputError` naming both lines.
* **zones and regions**: a zone whose region cannot be told (not an AZ name like ``us-east-1c`` or id
  like ``use1-az4``, and no ``region`` column), a ``region`` cell that contradicts its zone, or one
  market with rows in two regions: :class:`InputError` naming the line(s).
* **gaps**: AWS records only changes, so a market's price holds until its next row; the loader cannot
  tell a quiet market from missing data. The replays decide: a run may not go past a market's last row
  by more than ``market.max_stale_h`` (spot and Gavel scenarios; ``scenarios.spot_replay.check_coverage``),
  nor start before the market's first row.
"""

from __future__ import annotations

import csv
import io
import math
import re
import warnings
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import pandas as pd
from clustertwin.traces.files import parse_json, read_text

from clustertwin.atomic import write_atomically
from clustertwin.errors import InputError

COLUMNS = ("timestamp", "region", "zone", "instance_type", "price")
LINUX = "Linux/UNIX"

_CSV_SHAPES: dict[tuple[str, ...], dict[str, str]] = {
    # header -> canonical name of each used column
    COLUMNS: {c: c for c in COLUMNS},
    (
        "timestamp_utc",
        "region",
        "availability_zone",
        "instance_type",
        "product_description",
        "price_usd_per_hour",
    ): {
        "timestamp_utc": "timestamp",
        "region": "region",
        "availability_zone": "zone",
        "instance_type": "instance_type",
        "product_description": "product",
        "price_usd_per_hour": "price",
    },
    ("timestamp_utc", "az_id", "instance_type", "price_usd_per_hour"): {
        "timestamp_utc": "timestamp",
        "az_id": "zone",
        "instance_type": "instance_type",
        "price_usd_per_hour": "price",
    },
}
_ARCHIVE_COLUMNS = ("az_id", "instance_type", "product_description", "price", "timestamp")

# AZ-id region codes: use1 -> us-east-1, apne1 -> ap-northeast-1 (AWS's documented naming scheme).
_DIRECTIONS = {
    "e": "east",
    "w": "west",
    "n": "north",
    "s": "south",
    "c": "central",
    "ne": "northeast",
    "nw": "northwest",
    "se": "southeast",
    "sw": "southwest",
}
_AZ_ID = re.compile(r"^([a-z]{2})([a-z]{1,2})(\d+)-az\d+$")
_AZ_NAME = re.compile(r"^([a-z]{2}-[a-z]+-\d+)[a-z]$")


def region_of(zone: str) -> str:
    """Region of an AZ name (``us-east-1c`` -> ``us-east-1``) or AZ id (``use1-az4`` -> ``us-east-1``)."""
    if m := _AZ_NAME.match(zone):
        return m.group(1)
    if (m := _AZ_ID.match(zone)) and m.group(2) in _DIRECTIONS:
        return f"{m.group(1)}-{_DIRECTIONS[m.group(2)]}-{m.group(3)}"
    return ""


def load_spot_prices(path: str | Path) -> pd.DataFrame:
    """Read any supported price file (chosen by suffix: .json, .tsv/.tsv.zst/.zst, .csv)."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".json"):
        return load_aws_json(path)
    if name.endswith((".tsv", ".zst", ".tsv.zst")):
        return load_archive_tsv(path)
    if name.endswith(".csv"):
        return load_price_csv(path)
    raise InputError(
        str(path), "unknown spot-price format; expected .json (AWS), .tsv[.zst] (archive) or .csv"
    )


def load_aws_json(path: str | Path) -> pd.DataFrame:
    """Read ``describe-spot-price-history`` output (one response, or a list of responses)."""
    path = Path(path)
    text = read_text(path)
    data = parse_json(text, path)
    pages = data if isinstance(data, list) else [data]
    records: list[object] = []
    for page in pages:
        if not isinstance(page, dict) or not isinstance(page.get("SpotPriceHistory"), list):
            raise InputError(str(path), 'expected an object with a "SpotPriceHistory" list')
        records.extend(page["SpotPriceHistory"])
    # JSON parsing loses positions, so locate the k-th record by the k-th occurrence of its keys.
    starts = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r'"InstanceType"\s*:', text)]
    rows = []
    wheres = []
    for k, rec in enumerate(records):
        line = starts[k] if k < len(starts) else 0
        where = f"{path}:{line}" if line else f"{path}: record {k}"
        if not isinstance(rec, dict):
            raise InputError(where, f"record {k} is not an object")
        for key in ("Timestamp", "AvailabilityZone", "InstanceType", "SpotPrice"):
            if key not in rec or rec[key] is None:
                raise InputError(f"{where}: column {key}", f"record {k} lacks {key}")
            value = rec[key]
            if key == "SpotPrice":
                ok = isinstance(value, str | int | float) and not isinstance(value, bool)
            else:
                ok = isinstance(value, str)
            if not ok:
                raise InputError(
                    f"{where}: column {key}",
                    f"expected a {'number or ' if key == 'SpotPrice' else ''}string, got {value!r}",
                )
        if rec.get("ProductDescription", LINUX) != LINUX:
            continue
        zone = _nonempty(rec["AvailabilityZone"], f"{where}: column AvailabilityZone")
        rows.append(
            (
                _timestamp(rec["Timestamp"], f"{where}: column Timestamp"),
                region_of(zone),
                zone,
                _nonempty(rec["InstanceType"], f"{where}: column InstanceType"),
                _price(str(rec["SpotPrice"]), f"{where}: column SpotPrice"),
            )
        )
        wheres.append((where, "AvailabilityZone"))
    return _frame(rows, path, wheres)


def load_archive_tsv(path: str | Path) -> pd.DataFrame:
    """Read the monthly archive TSV (headerless; ``.zst`` compressed or plain)."""
    path = Path(path)
    if path.name.lower().endswith(".zst"):
        text = _decompress_zstd(path).decode("utf-8", errors="strict")
    else:
        text = read_text(path)
    rows = []
    wheres = []
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        cells = line.split("\t")
        where = f"{path}:{lineno}"
        if len(cells) != len(_ARCHIVE_COLUMNS):
            raise InputError(
                where,
                f"expected {len(_ARCHIVE_COLUMNS)} tab-separated columns "
                f"({', '.join(_ARCHIVE_COLUMNS)}), found {len(cells)}",
            )
        az, itype, product, price, stamp = cells
        if product != LINUX:
            continue
        rows.append(
            (
                _timestamp(stamp, f"{where}: column timestamp"),
                region_of(az),
                _nonempty(az, f"{where}: column az_id"),
                _nonempty(itype, f"{where}: column instance_type"),
                _price(price, f"{where}: column price"),
            )
        )
        wheres.append((where, "az_id"))
    return _frame(rows, path, wheres)


def load_price_csv(path: str | Path) -> pd.DataFrame:
    """Read a price CSV in one of the header shapes named in the module docstring."""
    path = Path(path)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    header = next(reader, None)
    if header is None:
        raise InputError(str(path), "empty file")
    shape = _CSV_SHAPES.get(tuple(h.strip() for h in header))
    if shape is None:
        known = " | ".join(",".join(h) for h in _CSV_SHAPES)
        raise InputError(f"{path}:1", f"unknown header {','.join(header)!r}; expected one of: {known}")
    names = [shape[h.strip()] for h in header]
    rows = []
    wheres = []
    for cells in reader:
        lineno = reader.line_num
        if not cells or all(not c.strip() for c in cells):
            continue
        where = f"{path}:{lineno}"
        if len(cells) != len(names):
            raise InputError(where, f"expected {len(names)} columns ({','.join(header)}), found {len(cells)}")
        row = dict(zip(names, cells, strict=True))
        if row.get("product", LINUX) != LINUX:
            continue
        col = {v: k for k, v in shape.items()}
        zone = _nonempty(row["zone"], f"{where}: column {col['zone']}")
        rows.append(
            (
                _timestamp(row["timestamp"], f"{where}: column {col['timestamp']}"),
                _region(row.get("region", "").strip(), zone, where, col["zone"]),
                zone,
                _nonempty(row["instance_type"], f"{where}: column instance_type"),
                _price(row["price"], f"{where}: column {col['price']}"),
            )
        )
        wheres.append((where, col["zone"]))
    return _frame(rows, path, wheres)


def write_price_csv(table: pd.DataFrame, path: str | Path) -> None:
    """Write a canonical table as canonical CSV, atomically; :func:`load_price_csv` reads it back equal."""
    path = Path(path)
    out = table.loc[:, list(COLUMNS)].copy()
    # Whole seconds (every public source) are written without a fraction, to keep files small.
    whole = bool((out["timestamp"].dt.microsecond == 0).all() and (out["timestamp"].dt.nanosecond == 0).all())
    out["timestamp"] = out["timestamp"].dt.strftime(
        "%Y-%m-%dT%H:%M:%SZ" if whole else "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    out["price"] = out["price"].map(repr)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda p: out.to_csv(p, index=False, lineterminator="\n", encoding="utf-8"))


def markets(table: pd.DataFrame) -> list[tuple[str, str]]:
    """The (instance_type, zone) pairs present, sorted."""
    pairs = table[["instance_type", "zone"]].drop_duplicates().itertuples(index=False, name=None)
    return sorted((str(a), str(b)) for a, b in pairs)


def select(
    table: pd.DataFrame,
    instance_types: Iterable[str] | None = None,
    zones: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Rows of the given types and zones (None: all)."""
    keep = pd.Series(True, index=table.index)
    if instance_types is not None:
        keep &= table["instance_type"].isin(list(instance_types))
    if zones is not None:
        keep &= table["zone"].isin(list(zones))
    return table.loc[keep].reset_index(drop=True)


def _decompress_zstd(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise InputError(str(path), f"cannot read: {err.strerror or err}") from None
    try:
        import pyarrow as pa

        if pa.Codec.is_available("zstd"):
            with pa.input_stream(pa.py_buffer(raw), compression="zstd") as stream:
                return stream.read()
    except ImportError:
        pass
    except OSError as err:  # pyarrow raises OSError (ArrowIOError) on a corrupt or truncated stream
        raise InputError(str(path), f"corrupt or truncated zstd data: {err}") from None
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        raise InputError(
            str(path),
            "reading .zst needs a zstd decoder: install pyarrow built with zstd, or `pip install zstandard`",
        ) from None
    try:
        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    except zstandard.ZstdError as err:
        raise InputError(str(path), f"corrupt or truncated zstd data: {err}") from None


def _timestamp(text: str, where: str) -> datetime:
    value = text.strip()
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise InputError(where, f"not an ISO-8601 timestamp: {text!r}") from None
    if stamp is pd.NaT:
        raise InputError(where, f"not an ISO-8601 timestamp: {text!r}")
    # A stamp without a zone is taken as UTC: every public source writes UTC.
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def _price(text: str, where: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InputError(where, f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(where, f"a price must be a finite number >= 0, got {text!r}")
    return value


def _nonempty(text: str, where: str) -> str:
    value = text.strip()
    if not value:
        raise InputError(where, "empty value")
    return value


def _region(given: str, zone: str, where: str, zone_col: str) -> str:
    """The region of a CSV row: its ``region`` cell, which must agree with the zone's own region."""
    derived = region_of(zone)
    if given and derived and given != derived:
        raise InputError(
            f"{where}: column region", f"region {given!r} contradicts zone {zone!r} (in {derived})"
        )
    return given or derived


def _frame(rows: list[tuple], path: Path, wheres: list[tuple[str, str]]) -> pd.DataFrame:
    if not rows:
        raise InputError(str(path), "no Linux/UNIX price rows")
    for (where, zone_col), row in zip(wheres, rows, strict=True):
        if not row[1]:
            raise InputError(
                f"{where}: column {zone_col}",
                f"{row[2]!r} is neither an AZ name (us-east-1c) nor an AZ id (use1-az4): its region is "
                "unknown (add a region column)",
            )
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True).astype("datetime64[ns, UTC]")
    frame["price"] = frame["price"].astype("float64")
    for col in ("region", "zone", "instance_type"):
        frame[col] = frame[col].astype(str)
    frame["_where"] = [w for w, _ in wheres]
    # One market lives in one region.
    regions = frame.groupby(["instance_type", "zone"], sort=True)["region"].nunique()
    if (regions > 1).any():
        itype, zone = regions[regions > 1].index[0]
        first, other = _first_disagreement(
            frame[(frame["instance_type"] == itype) & (frame["zone"] == zone)], "region"
        )
        raise InputError(
            f"{other['_where']}: column region",
            f"market {itype} in {zone} is in region {other['region']} here but {first['region']} at "
            f"{first['_where']}: a trace must not mix regions in one market",
        )
    # Sorting repairs any input order (documented); stable, so equal keys keep their file order.
    frame = frame.sort_values(["timestamp", "zone", "instance_type"], kind="stable").reset_index(drop=True)
    key = ["timestamp", "zone", "instance_type"]
    dup = frame.duplicated(key, keep=False)
    repairs: list[str] = []
    if dup.any():
        clash = frame[dup].groupby(key, sort=False)["price"].nunique()
        if (clash > 1).any():
            stamp, zone, itype = clash[clash > 1].index[0]
            at = (frame["timestamp"] == stamp) & (frame["zone"] == zone) & (frame["instance_type"] == itype)
            a, b = _first_disagreement(frame[at], "price")
            raise InputError(
                f"{b['_where']}: column price",
                f"{itype} in {zone} at {stamp.isoformat()} costs {b['price']!r} here but {a['price']!r} at "
                f"{a['_where']}: conflicting prices for one market at one instant",
            )
        extra = frame.duplicated(key, keep="first")
        first_where = frame.loc[extra, "_where"].iloc[0]
        repairs.append(
            f"{path}: dropped {int(extra.sum())} duplicate row(s) (same market, instant and price; "
            f"the first at {first_where})"
        )
        warnings.warn(repairs[-1], UserWarning, stacklevel=3)
        frame = frame.loc[~extra].reset_index(drop=True)
    frame = frame.drop(columns="_where")
    if repairs:
        frame.attrs["repairs"] = repairs
    return frame


# Bundled real prices: us-east-1 p2/p3, 2019-12-22..2020-03-23 (stanford-futuredata/training_on_a_dime
# @ 85f6595, MIT); provenance in traces/data/spot/README.md.
def _first_disagreement(rows: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series]:
    """The first of ``rows`` and the first later row whose ``column`` differs from it (the two lines an
    error about a market names)."""
    first = rows.iloc[0]
    return first, rows[rows[column] != first[column]].iloc[0]


SPOT_DIR = Path(__file__).resolve().parent / "data" / "spot"
BUNDLED_SPOT_TRACES = {"aws-p2-p3-us-east-1-2020": SPOT_DIR / "aws_p2_p3_us-east-1_2019-12_2020-03.csv"}


def load_bundled_or_path(name_or_path: str | Path) -> pd.DataFrame:
    """A bundled trace by name (see ``BUNDLED_SPOT_TRACES``) or any price file by path."""
    key = str(name_or_path)
    return load_spot_prices(BUNDLED_SPOT_TRACES.get(key, Path(key)))
