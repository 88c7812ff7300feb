"""The instance catalog: size, price, accelerator power and embodied emissions per type.

Loaded once from ``agent/data/instances.csv``, whose header documents every column and
whose rows each carry a ``source`` and ``date``. Prices there are list prices as known
when the file was written, not live: they are a default a user can override, and an
unknown type is an unknown price (None), never zero, so a report can say "cost unknown"
instead of silently under-counting.

SageMaker: ``ml.<type>`` runs on the EC2 type ``<type>`` (same vCPUs, memory,
accelerators, server), so the spec is the EC2 row's; the price is the row's separate
``sagemaker_usd_per_hour`` column, with its own ``sagemaker_source`` (a public file or
page), because SageMaker charges a premium that differs by family (roughly +15 % to
+40 %). Where that column is empty the price is unknown: we do not guess a markup.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from joulestat.carbon.datafiles import load_table
from joulestat.carbon.prices import PriceTable
from joulestat.carbon.regions import PROVIDERS

SAGEMAKER_PREFIX = "ml."
_COLUMNS = ("provider", "instance_type", "vcpus", "memory_gib", "accelerator_model",
            "accelerator_count", "usd_per_hour", "sagemaker_usd_per_hour",
            "sagemaker_source", "accelerator_max_power_w", "embodied_kgco2e",
            "embodied_source", "lifetime_years", "family_max_vcpus", "source", "date",
            "price_note", "note")
_NO_TYPE = frozenset({"", "local", "unknown", "none"})


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One catalog row. ``instance_type`` is the name asked for (``ml.g5.xlarge`` stays
    ``ml.g5.xlarge``; ``sagemaker`` says the EC2 row behind it was used)."""

    provider: str
    instance_type: str
    vcpus: int
    memory_gib: float
    accelerator_model: str | None
    accelerator_count: int
    usd_per_hour: float | None
    sagemaker_usd_per_hour: float | None
    sagemaker_source: str
    accelerator_max_power_w: float | None
    embodied_kgco2e: float | None
    embodied_source: str
    lifetime_years: float
    family_max_vcpus: int
    source: str
    date: str
    price_note: str
    note: str
    sagemaker: bool = False


@dataclass(frozen=True, slots=True)
class Price:
    """An hourly price and where it came from; ``usd_per_hour`` None means unknown."""

    usd_per_hour: float | None
    source: str
    note: str


def _optional_float(value: str, column: str, where: str) -> float | None:
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{where}: {column} is not a number: {value!r}") from None
    if math.isnan(number) or number < 0:
        raise ValueError(f"{where}: {column} must be >= 0, got {value!r}")
    return number


def _required_int(value: str, column: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{where}: {column} must be an integer, got {value!r}") from None


def _check_sagemaker(row: dict[str, str], usd: float | None, where: str) -> None:
    """A SageMaker price is an AWS row's, and names its own source; no source without one."""
    if usd is not None and row["provider"] != "aws":
        raise ValueError(f"{where}: sagemaker_usd_per_hour is for aws rows only")
    if usd is not None and not row["sagemaker_source"]:
        raise ValueError(f"{where}: sagemaker_usd_per_hour needs a sagemaker_source")
    if usd is None and row["sagemaker_source"]:
        raise ValueError(f"{where}: sagemaker_source given without sagemaker_usd_per_hour")


def parse_catalog(rows: list[dict[str, str]], origin: str) -> dict[str, InstanceSpec]:
    """Validate table rows into specs keyed by lower-case instance type."""
    catalog: dict[str, InstanceSpec] = {}
    for number, row in enumerate(rows, start=1):
        where = f"{origin} row {number} ({row.get('instance_type')!r})"
        if row["provider"] not in PROVIDERS:
            raise ValueError(f"{where}: provider must be one of {PROVIDERS}")
        if not row["source"] or not row["date"]:
            raise ValueError(f"{where}: every row needs a source and a date")
        vcpus = _required_int(row["vcpus"], "vcpus", where)
        family_max = _required_int(row["family_max_vcpus"], "family_max_vcpus", where)
        if not 0 < vcpus <= family_max:
            raise ValueError(f"{where}: need 0 < vcpus <= family_max_vcpus")
        embodied = _optional_float(row["embodied_kgco2e"], "embodied_kgco2e", where)
        if embodied is not None and not row["embodied_source"]:
            raise ValueError(f"{where}: embodied_kgco2e needs an embodied_source")
        lifetime = _optional_float(row["lifetime_years"], "lifetime_years", where)
        if not lifetime:
            raise ValueError(f"{where}: lifetime_years must be positive")
        sagemaker = _optional_float(row["sagemaker_usd_per_hour"], "sagemaker_usd_per_hour",
                                    where)
        _check_sagemaker(row, sagemaker, where)
        spec = InstanceSpec(
            provider=row["provider"],
            instance_type=row["instance_type"],
            vcpus=vcpus,
            memory_gib=_optional_float(row["memory_gib"], "memory_gib", where) or 0.0,
            accelerator_model=row["accelerator_model"] or None,
            accelerator_count=_required_int(row["accelerator_count"] or "0",
                                            "accelerator_count", where),
            usd_per_hour=_optional_float(row["usd_per_hour"], "usd_per_hour", where),
            sagemaker_usd_per_hour=sagemaker,
            sagemaker_source=row["sagemaker_source"],
            accelerator_max_power_w=_optional_float(row["accelerator_max_power_w"],
                                                    "accelerator_max_power_w", where),
            embodied_kgco2e=embodied,
            embodied_source=row["embodied_source"],
            lifetime_years=lifetime,
            family_max_vcpus=family_max,
            source=row["source"],
            date=row["date"],
            price_note=row["price_note"],
            note=row["note"],
        )
        key = spec.instance_type.lower()
        if key in catalog:
            raise ValueError(f"{where}: instance type listed twice")
        catalog[key] = spec
    return catalog


def load_catalog(path: Path | None = None) -> dict[str, InstanceSpec]:
    """Parse the catalog at ``path`` (default: the bundled one)."""
    return load_table(path, "instances.csv", _COLUMNS, parse_catalog)


@functools.lru_cache(maxsize=1)
def default_catalog() -> dict[str, InstanceSpec]:
    """The bundled catalog, read once per process."""
    return load_catalog()


def lookup(instance_type: str | None) -> InstanceSpec | None:
    """The spec of ``instance_type`` (case-insensitive; ``ml.*`` via its EC2 type), or None."""
    if instance_type is None or instance_type.strip().lower() in _NO_TYPE:
        return None
    key = instance_type.strip().lower()
    catalog = default_catalog()
    if key in catalog:
        return catalog[key]
    if key.startswith(SAGEMAKER_PREFIX):
        base = catalog.get(key[len(SAGEMAKER_PREFIX):])
        if base is not None and base.provider == "aws":
            return dataclasses.replace(base, instance_type=instance_type.strip(),
                                       sagemaker=True)
    return None


def accelerators_of(instance_type: str | None) -> str:
    """What accelerators a type carries, for a row label: "1 x AWS Inferentia2", "none"
    (a type without), or "unknown" (a type not in the catalog)."""
    spec = lookup(instance_type)
    if spec is None:
        return "unknown"
    if not spec.accelerator_model or spec.accelerator_count <= 0:
        return "none"
    return f"{spec.accelerator_count} x {spec.accelerator_model}"


def _check_override(value: float) -> float:
    number = float(value)
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"price override must be a finite number >= 0 USD/h, got {value!r}")
    return number


OVERRIDE_HOW = "--price-per-hour USD or --prices FILE"
# ``joulestat demo``'s placeholder setups (joulestat.demo.training_serving): made-up rates, so the
# README's first ten minutes show costs wherever the demo's jobs are read (compare,
# reports, every dashboard page) with no prices file to pass around. Their own source,
# ``demo``, and a note saying they are no cloud offer; a prices file still wins.
DEMO_PRICES_USD_PER_H = {"demo-1vcpu": 0.05, "demo-2vcpu": 0.10}
DEMO_PRICE_NOTE = "joulestat demo's made-up price for a placeholder setup, not a cloud offer"


def price_per_hour(instance_type: str | None, override_usd: float | None = None,
                   prices: PriceTable | None = None) -> Price:
    """USD per hour of ``instance_type``, from the first that knows it:

    1. ``override_usd`` (``--price-per-hour``): one price for every type;
    2. ``prices`` (``--prices FILE``): the file's row for this exact type;
    3. the catalog: on-demand list price, or the SageMaker column for ``ml.*``
       (``joulestat demo``'s placeholder types: :data:`DEMO_PRICES_USD_PER_H`);
    4. unknown (None), with a note saying what to type to set it.
    """
    if override_usd is not None:
        return Price(_check_override(override_usd), "override",
                     "set by --price-per-hour (one price for every instance type)")
    row = prices.get(instance_type) if prices is not None else None
    if prices is not None and row is not None:
        return Price(row.usd_per_hour, prices.source,
                     f"{row.instance_type} on line {row.line} of --prices {prices.path}")
    return _catalog_price(instance_type, prices)


def _catalog_price(instance_type: str | None, prices: PriceTable | None) -> Price:
    """The catalog's price; the note of an unknown says what to type, and that a prices
    file in use has no row for this type."""
    missing = f"; {prices.path} has no row for it" if prices is not None and (
        instance_type and instance_type.strip().lower() not in _NO_TYPE) else ""
    demo_usd = DEMO_PRICES_USD_PER_H.get((instance_type or "").strip().lower())
    if demo_usd is not None:
        return Price(demo_usd, "demo", DEMO_PRICE_NOTE)
    spec = lookup(instance_type)
    if spec is None:
        what = f"instance type {instance_type!r} is not in the catalog" if (
            instance_type and instance_type.strip().lower() not in _NO_TYPE
        ) else "no instance type known"
        return Price(None, "unknown", f"{what}{missing}: cost unknown (set {OVERRIDE_HOW})")
    if spec.sagemaker:
        sagemaker_note = sagemaker_note_of(spec)
        if spec.sagemaker_usd_per_hour is None:
            ec2 = f"; EC2 on-demand is {spec.usd_per_hour} USD/h" if spec.usd_per_hour else ""
            why = f" ({sagemaker_note})" if sagemaker_note else ""
            return Price(None, "unknown",
                         f"no SageMaker price for {spec.instance_type} in the catalog{why}"
                         f"{ec2}, and SageMaker charges more{missing}: cost unknown (set "
                         f"{OVERRIDE_HOW})")
        note = "SageMaker on-demand list price, as its source gives it"
        return Price(spec.sagemaker_usd_per_hour, f"catalog:{spec.sagemaker_source}",
                     f"{note}; {sagemaker_note}" if sagemaker_note else note)
    if spec.usd_per_hour is None:
        return Price(None, "unknown", f"the catalog has no price for {spec.instance_type}"
                     f"{missing}: cost unknown (set {OVERRIDE_HOW})")
    region = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"}[spec.provider]
    note = f"on-demand Linux, {region}, list price as of {spec.date}"
    ec2_note = _note_parts(spec.price_note)[0]
    return Price(spec.usd_per_hour, f"catalog:{spec.source}",
                 f"{note}; {ec2_note}" if ec2_note else note)


def sagemaker_note_of(spec: InstanceSpec) -> str:
    """What a row's ``price_note`` says of its SageMaker price (which use, which source,
    or why there is none); "" when it says nothing."""
    return _note_parts(spec.price_note)[1]


def _note_parts(price_note: str) -> tuple[str, str]:
    """A row's ``price_note`` split into what it says of the on-demand price and what of
    the SageMaker price (the ``; ``-separated parts starting with ``SageMaker``), so each
    price carries only its own caveats."""
    parts = [p.strip() for p in price_note.split("; ") if p.strip()]
    sagemaker = [p for p in parts if p.startswith("SageMaker")]
    return ("; ".join(p for p in parts if p not in sagemaker), "; ".join(sagemaker))


def is_known_or_unset(instance_type: str | None) -> bool:
    """True for a type the catalog has (``ml.*`` of an AWS row included) and for none at
    all (``local``, ``unknown``, empty): the cases that need no warning."""
    return (instance_type is None or instance_type.strip().lower() in _NO_TYPE
            or lookup(instance_type) is not None)


def closest_types(instance_type: str, limit: int = 3) -> list[str]:
    """Catalog types that look like ``instance_type`` (difflib ratio >= 0.6), best first,
    so a typo (``c5.larg``) is answered with what was probably meant (``c5.large``). An
    ``ml.`` name is matched against the ``ml.`` names SageMaker would accept."""
    key = instance_type.strip().lower()
    names = [spec.instance_type for spec in default_catalog().values()]
    if key.startswith(SAGEMAKER_PREFIX):
        names = [SAGEMAKER_PREFIX + spec.instance_type for spec in default_catalog().values()
                 if spec.provider == "aws"]
    by_lower = {name.lower(): name for name in names}
    return [by_lower[m] for m in difflib.get_close_matches(key, list(by_lower), n=limit)]
