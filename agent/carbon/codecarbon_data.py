"""Grid-intensity tables bundled in the pinned codecarbon wheel, read by path.

Like :mod:`joulestat.devices.cpu_tdp`, this never imports ``codecarbon``: its ``__init__``
pulls in pandas and the tracker, tens of MiB we do not want in the agent or in a report.
``importlib.util.find_spec`` only locates the package directory. codecarbon is pinned
(==3.3.2) in pyproject because these files move and change shape between releases; the
parsers below check the shape they rely on and fail loudly rather than guess.

Files used (all under ``codecarbon/data``; MIT licence):

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
import importlib.util
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENERGY_MIX = Path("data") / "private_infra" / "global_energy_mix.json"
USA_EMISSIONS = Path("data") / "private_infra" / "2023" / "usa_emissions.json"
CANADA_MIX = Path("data") / "private_infra" / "2023" / "canada_energy_mix.json"
PER_SOURCE = Path("data") / "private_infra" / "carbon_intensity_per_source.json"
GCP_IMPACT = Path("data") / "cloud" / "impact.csv"

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

# impact.csv in codecarbon 3.3.2 spells me-central1 (Doha) "me-cenrtal1".
_GCP_REGION_TYPOS = {"me-cenrtal1": "me-central1"}


class CarbonDataError(RuntimeError):
    """codecarbon's bundled data is missing or not in the shape this code expects."""


def codecarbon_package_dir() -> Path | None:
    """Directory of the installed codecarbon package, found without importing it."""
    spec = importlib.util.find_spec("codecarbon")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


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
    """Everything the resolver needs, parsed once. ``root`` is codecarbon's package dir."""

    root: Path
    countries: dict[str, CountryIntensity]
    us_states: dict[str, StateRate]  # by two-letter postal code
    us_year: int | None
    us_source: str
    canada_mix: dict[str, dict[str, float]]  # province name (lower case) -> shares %
    per_source_g_per_kwh: dict[str, float]
    world_average_g_per_kwh: float
    world_average_source: str
    gcp_regions: dict[str, GcpRegionIntensity]


def _read_json(root: Path, relative: Path) -> Any:
    path = root / relative
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise CarbonDataError(f"{path}: cannot read ({exc.strerror}); is codecarbon==3.3.2 "
                              "installed?") from None
    except ValueError as exc:
        raise CarbonDataError(f"{path}: not valid JSON: {exc}") from None


def _countries(root: Path) -> dict[str, CountryIntensity]:
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
        raise CarbonDataError(f"{root / ENERGY_MIX}: no country has a carbon_intensity")
    return result


def _us_states(root: Path) -> tuple[dict[str, StateRate], int | None, str]:
    data = _read_json(root, USA_EMISSIONS)
    unit = data.get("_unit", {}).get("emissions")
    if unit != "lbs/MWh":
        raise CarbonDataError(f"{root / USA_EMISSIONS}: expected emissions in lbs/MWh, "
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


def _gcp_regions(root: Path) -> dict[str, GcpRegionIntensity]:
    path = root / GCP_IMPACT
    try:
        text = path.read_text(encoding="utf-8-sig")  # the file starts with a BOM
    except OSError as exc:
        raise CarbonDataError(f"{path}: cannot read ({exc.strerror})") from None
    result = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("provider") != "gcp":
            continue
        region = _GCP_REGION_TYPOS.get(row["region"], row["region"])
        result[region] = GcpRegionIntensity(
            region, float(row["impact"]), row["countryIsoCode"], row["city"], row["source"])
    return result


def load_grid_data(root: Path | None = None) -> GridData:
    """Parse codecarbon's tables from ``root`` (default: the installed package)."""
    if root is None:
        root = codecarbon_package_dir()
        if root is None:
            raise CarbonDataError("codecarbon is not installed; joulestat pins "
                                  "codecarbon==3.3.2 for its grid-intensity data")
    per_source = _read_json(root, PER_SOURCE)
    if per_source.get("unit") != "gCO2.eq/kWh" or "world_average" not in per_source:
        raise CarbonDataError(f"{root / PER_SOURCE}: expected unit gCO2.eq/kWh and a "
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
    """The installed package's tables, parsed once per process."""
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
