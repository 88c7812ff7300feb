"""Grid-intensity tables from CodeCarbon 3.3.2, shipped in joulestat's own package.

The files live in ``joulestat/data/codecarbon/`` (``agent/data/codecarbon/`` in the tree),
copied unchanged from the codecarbon 3.3.2 wheel under its MIT licence (the licence text
and a README naming the source sit beside them), and are read through
:mod:`importlib.resources`. codecarbon itself is neither imported nor needed: its
``__init__`` pulls in pandas and the tracker (tens of MiB, and a version pin a user's own
CodeCarbon would fight). The parsers below check the shape they rely on and fail naming
the file rather than guess, so a refresh from a newer release that moved a field stops
the tests, not a user's report.

Files used (paths as under ``codecarbon/data``):

* ``private_infra/global_energy_mix.json``: per ISO 3166-1 alpha-3 country, a
  ``carbon_intensity`` (gCO2e/kWh, Our World in Data / Ember, lifecycle) and ``year``.
* ``private_infra/2023/usa_emissions.json``: per US state, EPA eGRID2023 annual CO2e
  total output emission rate ``STC2ERTA`` in **lb/MWh**, keyed by lower-case state name
  with a ``regionCode`` (two-letter postal code).
* ``private_infra/2023/canada_energy_mix.json``: per province, generation shares in
  percent by source (no intensity: we weight lifecycle factors, see
  :func:`canada_province_g_per_kwh`).
* ``private_infra/carbon_intensity_per_source.json``: lifecycle gCO2e/kWh per source
  and ``world_average``.
* ``cloud/impact.csv``: Google Cloud's published grid intensity per GCP region
  (``impact`` in gCO2e/kWh).
"""

from __future__ import annotations

import csv
import functools
import io
import json
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from joulestat.core.package_data import missing_data_advice

# CodeCarbon's release the files were copied from (agent/data/codecarbon/README.md).
CODECARBON_VERSION = "3.3.2"

# Paths relative to the data root, as under codecarbon/data in CodeCarbon's wheel.
ENERGY_MIX = ("private_infra", "global_energy_mix.json")
USA_EMISSIONS = ("private_infra", "2023", "usa_emissions.json")
CANADA_MIX = ("private_infra", "2023", "canada_energy_mix.json")
PER_SOURCE = ("private_infra", "carbon_intensity_per_source.json")
GCP_IMPACT = ("cloud", "impact.csv")

# The Canadian file lives under a "2023" directory and carries no year of its own.
CANADA_YEAR = 2023

# Canadian source names -> keys of carbon_intensity_per_source.json. "tidal" and
# "other" have no factor there; they count as 0 g/kWh (all zero in 3.3.2's data).
_CANADA_SOURCE_KEYS = {
    "naturalGas": "natural_gas",
    "petroleum": "petroleum",
    "coal": "coal",
    "nuclear": "nuclear",
    "hydro": "hydroelectricity",
    "wind": "wind",
    "solar": "solar",
    "biomass": "biomass",
}

GCP_COLUMNS = ("provider", "region", "impact", "countryIsoCode", "city", "source")

# impact.csv in codecarbon 3.3.2 spells me-central1 (Doha) "me-cenrtal1".
_GCP_REGION_TYPOS = {"me-cenrtal1": "me-central1"}


class CarbonDataError(RuntimeError):
    """The bundled CodeCarbon data is missing or not in the shape this code expects."""


def codecarbon_data_root() -> Traversable:
    """``joulestat/data/codecarbon``: the copied tables, as package resources."""
    return files("joulestat") / "data" / "codecarbon"


def _file(root: Traversable, relative: tuple[str, ...]) -> Traversable:
    path = root
    for part in relative:
        path = path / part
    return path


@dataclass(frozen=True, slots=True)
class CountryIntensity:
    iso3: str
    name: str
    g_per_kwh: float
    year: int | None


@dataclass(frozen=True, slots=True)
class StateRate:
    postal_code: str
    name: str
    lbs_per_mwh: float


@dataclass(frozen=True, slots=True)
class GcpRegionIntensity:
    region: str
    g_per_kwh: float
    country_iso3: str
    city: str
    source_url: str


@dataclass(frozen=True, slots=True)
class GridData:
    """Everything the resolver needs, parsed once. ``root`` is the data directory."""

    root: Traversable
    countries: dict[str, CountryIntensity]
    us_states: dict[str, StateRate]  # by two-letter postal code
    us_year: int | None
    us_source: str
    canada_mix: dict[str, dict[str, float]]  # province name (lower case) -> shares %
    per_source_g_per_kwh: dict[str, float]
    world_average_g_per_kwh: float
    world_average_source: str
    gcp_regions: dict[str, GcpRegionIntensity]


def _read_json(root: Traversable, relative: tuple[str, ...]) -> Any:
    path = _file(root, relative)
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise CarbonDataError(f"{path}: cannot read ({exc.strerror}); "
                              f"{missing_data_advice()}") from None
    except ValueError as exc:
        raise CarbonDataError(f"{path}: not valid JSON: {exc}") from None


def _countries(root: Traversable) -> dict[str, CountryIntensity]:
    data = _read_json(root, ENERGY_MIX)
    result = {}
    for iso3, row in data.items():
        if not isinstance(row, dict) or row.get("carbon_intensity") is None:
            continue
        year = row.get("year")
        result[iso3.upper()] = CountryIntensity(
            iso3.upper(), str(row.get("country_name", iso3)), float(row["carbon_intensity"]),
            int(year) if year is not None else None)
    if not result:
        raise CarbonDataError(f"{_file(root, ENERGY_MIX)}: no country has a carbon_intensity")
    return result


def _us_states(root: Traversable) -> tuple[dict[str, StateRate], int | None, str]:
    data = _read_json(root, USA_EMISSIONS)
    unit = data.get("_unit", {}).get("emissions")
    if unit != "lbs/MWh":
        raise CarbonDataError(f"{_file(root, USA_EMISSIONS)}: expected emissions in lbs/MWh, "
                              f"got {unit!r}")
    meta = data.get("_source", {})
    states = {}
    for name, row in data.items():
        if name.startswith("_") or name == "usa" or not isinstance(row, dict):
            continue
        code = str(row["regionCode"]).upper()
        states[code] = StateRate(code, name, float(row["emissions"]))
    year = meta.get("year")
    source = f"{meta.get('name', 'EPA eGRID')} ({meta.get('url', '')})"
    return states, int(year) if year is not None else None, source


def _gcp_regions(root: Traversable) -> dict[str, GcpRegionIntensity]:
    path = _file(root, GCP_IMPACT)
    try:
        text = path.read_text(encoding="utf-8-sig")  # the file starts with a BOM
    except OSError as exc:
        raise CarbonDataError(f"{path}: cannot read ({exc.strerror})") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in GCP_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CarbonDataError(f"{path}: missing column(s) {', '.join(missing)}")
    result = {}
    for row in reader:
        if row.get("provider") != "gcp":
            continue
        region = _GCP_REGION_TYPOS.get(row["region"], row["region"])
        result[region] = GcpRegionIntensity(
            region, float(row["impact"]), row["countryIsoCode"], row["city"], row["source"])
    return result


def load_grid_data(root: Traversable | None = None) -> GridData:
    """Parse the tables under ``root``, laid out as ``codecarbon/data`` (default: the copy
    in joulestat's package, :func:`codecarbon_data_root`)."""
    if root is None:
        root = codecarbon_data_root()
    per_source = _read_json(root, PER_SOURCE)
    if per_source.get("unit") != "gCO2.eq/kWh" or "world_average" not in per_source:
        raise CarbonDataError(f"{_file(root, PER_SOURCE)}: expected unit gCO2.eq/kWh and a "
                              "world_average")
    factors = {k: float(v) for k, v in per_source.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    states, us_year, us_source = _us_states(root)
    canada = {name.lower(): {k: float(v) for k, v in mix.items()}
              for name, mix in _read_json(root, CANADA_MIX).items()}
    return GridData(
        root=root,
        countries=_countries(root),
        us_states=states,
        us_year=us_year,
        us_source=us_source,
        canada_mix=canada,
        per_source_g_per_kwh=factors,
        world_average_g_per_kwh=factors["world_average"],
        world_average_source=str(per_source.get("world_average_source", "")),
        gcp_regions=_gcp_regions(root),
    )


@functools.lru_cache(maxsize=1)
def default_grid_data() -> GridData:
    """The bundled tables, parsed once per process."""
    return load_grid_data()


def canada_province_g_per_kwh(mix: dict[str, float], factors: dict[str, float]) -> float:
    """A province's intensity: its generation shares weighted by lifecycle factors.

    Σ share_s × factor_s / total, with the factors of ``carbon_intensity_per_source.json``
    (the same lifecycle basis as the country figures). codecarbon's own tracker counts only
    coal, oil and gas here, which gives near-zero values for hydro provinces; we count every
    source so a province and its country are comparable. A source without a factor counts
    as 0 g/kWh but stays in the denominator.
    """
    total = mix.get("total") or sum(v for k, v in mix.items() if k != "total")
    if total <= 0:
        raise CarbonDataError(f"Canadian energy mix with no generation: {mix!r}")
    weighted = sum(share * factors[_CANADA_SOURCE_KEYS[source]]
                   for source, share in mix.items() if source in _CANADA_SOURCE_KEYS)
    return weighted / total
