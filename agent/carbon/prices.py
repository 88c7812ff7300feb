"""A user's own hourly prices per instance type: ``--prices FILE``.

Why a file and not only ``--price-per-hour``: a fleet mixes instance types, and what a
team pays per type is rarely the list price (negotiated rates, Savings Plans, spot,
SageMaker rates), so one price for everything is wrong as soon as a job spans two types.
The file is a CSV a person writes and reviews::

    # our 1-year Savings Plan rates, us-east-1, 2025-06
    instance_type,usd_per_hour
    ml.p4d.24xlarge,25.10
    g5.xlarge,0.61

``#`` lines and blank lines are skipped; instance types match case-insensitively and
exactly (a ``g5.xlarge`` row does not price ``ml.g5.xlarge``: SageMaker bills its own
rate); other columns (a ``note``, say) are allowed and ignored. Every fault is a
:class:`PricesError` naming the file and the line, raised when the command starts, not
in the middle of a report.

A :class:`PriceTable` is frozen and hashable, so it can sit in
:class:`~joulestat.carbon.footprint.CarbonSettings` and in a cache key, and it remembers its
file so every figure priced from it can name where the price came from.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

HEADER = ("instance_type", "usd_per_hour")


class PricesError(ValueError):
    """A prices file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class PriceRow:
    """One row: the type as written, its USD per hour and the line it is on."""

    instance_type: str
    usd_per_hour: float
    line: int


@dataclass(frozen=True)
class PriceTable:
    """The rows of one prices file, keyed by lower-case instance type.

    ``path`` is the file (absolute), named by every price taken from it. Equality and the
    hash cover the path and the rows, so two reads of the same file are the same table.
    """

    path: str
    rows: tuple[PriceRow, ...]
    _by_type: dict[str, PriceRow] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_type", {r.instance_type.lower(): r for r in self.rows})

    def get(self, instance_type: str | None) -> PriceRow | None:
        """The row for ``instance_type`` (case-insensitive), or None."""
        if not instance_type:
            return None
        return self._by_type.get(instance_type.strip().lower())

    @property
    def source(self) -> str:
        """What a priced figure names as its source: ``prices file /abs/prices.csv``."""
        return f"prices file {self.path}"


def _price(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PricesError(f"{where}: usd_per_hour is not a number: {text!r}") from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise PricesError(f"{where}: usd_per_hour must be a finite number >= 0, got {text!r}")
    return value


def parse_prices(text: str, path: str) -> PriceTable:
    """The table in ``text`` (the content of ``path``); :class:`PricesError` on any fault."""
    header: list[str] | None = None
    rows: list[PriceRow] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path} line {number}"
        cells = [c.strip() for c in next(csv.reader([line]))]
        if header is None:
            header = [c.lower() for c in cells]
            missing = [c for c in HEADER if c not in header]
            if missing:
                raise PricesError(f"{where}: expected a header with columns "
                                  f"{','.join(HEADER)}, got {line.strip()!r}")
            continue
        if len(cells) != len(header):
            raise PricesError(f"{where}: expected {len(header)} columns "
                              f"({','.join(header)}), got {len(cells)}")
        value = dict(zip(header, cells, strict=True))
        itype = value["instance_type"]
        if not itype or any(ch.isspace() for ch in itype):
            raise PricesError(f"{where}: instance_type must be one word, got {itype!r}")
        key = itype.lower()
        if key in seen:
            raise PricesError(f"{where}: instance type {itype!r} is already priced on line "
                              f"{seen[key]}")
        seen[key] = number
        rows.append(PriceRow(itype, _price(value["usd_per_hour"], where), number))
    if header is None:
        raise PricesError(f"{path} line 1: empty: expected a header "
                          f"{','.join(HEADER)} and one row per instance type")
    if not rows:
        raise PricesError(f"{path}: no prices after the header")
    return PriceTable(path, tuple(rows))


def load_prices(path: Path | str) -> PriceTable:
    """Read and validate the prices file at ``path``; the table names its absolute path."""
    resolved = Path(path).expanduser().resolve()
    try:
        text = resolved.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PricesError(f"{resolved}: cannot read: {reason}") from None
    return parse_prices(text, str(resolved))


def prices_option(value: object) -> PriceTable | None:
    """The ``prices`` setting (flag, env or TOML): a path to a prices file, read and
    checked now so a bad file stops the command before it does anything; empty is none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str | Path):
        raise PricesError(f"expected the path of a CSV file, got {value!r}")
    return load_prices(str(value).strip())
