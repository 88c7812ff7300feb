"""Location-based grid carbon intensity for a region, with where it came from.

GHG Protocol Scope 2 asks for location-based accounting at least, and SCI's ``I`` is
location-based too, so this module answers one question: what is the average grid
intensity where this node ran? It walks from the most specific data to the least:

1. a user override (``carbon_intensity_g_per_kwh``), always winning;
2. the cloud region's own published figure (GCP regions in codecarbon's impact.csv);
3. the region's US state (EPA eGRID2023, lb/MWh converted) or Canadian province
   (codecarbon's generation mix weighted by lifecycle factors);
4. its country (codecarbon's global energy mix, Our World in Data / Ember);
5. the world average in codecarbon's ``carbon_intensity_per_source.json``.

Every answer says which step produced it and, in ``note``, why the earlier ones did not,
so a report never passes off a world average as a measured location.

Accepted region strings: AWS / GCP / Azure region codes (and their availability zones,
Azure display names), ISO 3166-1 alpha-3 countries (``FRA``), US states and Canadian
provinces as ISO 3166-2 (``US-VA``, ``CA-QC``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from joulestat.carbon.codecarbon_data import (
    CANADA_YEAR,
    GridData,
    canada_province_g_per_kwh,
    default_grid_data,
)
from joulestat.carbon.regions import find_region
from joulestat.carbon.units import lbs_per_mwh_to_g_per_kwh
from joulestat.core import units

_ISO3 = re.compile(r"^[A-Z]{3}$")
_US_OR_CA_SUBDIVISION = re.compile(r"^(US|CA)-([A-Z]{2})$")
_NO_REGION = frozenset({"", "local", "unknown", "none"})

# ISO 3166-2:CA codes -> province names as codecarbon's canada_energy_mix.json keys them.
CANADA_PROVINCES = {
    "AB": "alberta", "BC": "british columbia", "MB": "manitoba", "NB": "new brunswick",
    "NL": "newfoundland and labrador", "NS": "nova scotia", "NT": "northwest territories",
    "NU": "nunavut", "ON": "ontario", "PE": "prince edward island", "QC": "quebec",
    "SK": "saskatchewan", "YT": "yukon",
}
_COUNTRY_OF_PREFIX = {"US": "USA", "CA": "CAN"}


@dataclass(frozen=True, slots=True)
class Intensity:
    """A grid intensity and its provenance.

    ``source`` names the table (``override``, ``codecarbon:gcp-impact``,
    ``codecarbon:usa-egrid2023:VA``, ``codecarbon:canada-mix2023:QC``,
    ``codecarbon:energy-mix:FRA``, ``codecarbon:world-average``, ``electricitymaps:FR``);
    ``year`` the data year where the table gives one; ``location`` the key that was used;
    ``note`` how the region led there, fallbacks included.
    """

    g_per_kwh: float
    source: str
    year: int | None
    location: str
    note: str


def _explained(found: Intensity, head: str, reasons: list[str]) -> Intensity:
    """``found`` with a note of the form ``head: reason; reason: what was used``."""
    chain = f"{'; '.join(reasons)}: {found.note}" if reasons else found.note
    note = f"{head}: {chain}" if head else chain
    return Intensity(found.g_per_kwh, found.source, found.year, found.location, note)


def _world(grid: GridData) -> Intensity:
    return Intensity(grid.world_average_g_per_kwh, "codecarbon:world-average", None, "world",
                     f"world average ({grid.world_average_source})")


def _country(grid: GridData, iso3: str) -> Intensity | None:
    country = grid.countries.get(iso3)
    if country is None:
        return None
    return Intensity(country.g_per_kwh, f"codecarbon:energy-mix:{iso3}", country.year, iso3,
                     f"country {iso3} ({country.name})")


def _subdivision(grid: GridData, code: str) -> Intensity | None:
    match = _US_OR_CA_SUBDIVISION.match(code)
    if match is None:
        return None
    prefix, part = match.groups()
    if prefix == "US":
        state = grid.us_states.get(part)
        if state is None:
            return None
        return Intensity(
            lbs_per_mwh_to_g_per_kwh(state.lbs_per_mwh),
            f"codecarbon:usa-egrid{grid.us_year or ''}:{part}", grid.us_year, code,
            f"US state {part} ({state.name}): {units.sig(state.lbs_per_mwh)} lb/MWh from "
            f"{grid.us_source}")
    province = CANADA_PROVINCES.get(part)
    mix = grid.canada_mix.get(province) if province else None
    if mix is None:
        return None
    return Intensity(
        canada_province_g_per_kwh(mix, grid.per_source_g_per_kwh),
        f"codecarbon:canada-mix{CANADA_YEAR}:{part}", CANADA_YEAR, code,
        f"Canadian province {part} ({province}): generation mix x lifecycle factors")


def _check_override(value: float) -> float:
    number = float(value)
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"carbon intensity override must be a finite number >= 0 g/kWh, "
                         f"got {value!r}")
    return number


def resolve_intensity(
    region: str | None,
    override_g_per_kwh: float | None = None,
    *,
    grid: GridData | None = None,
) -> Intensity:
    """The grid intensity for ``region`` (see the module doc for the chain).

    ``grid`` replaces codecarbon's installed tables (tests); it is parsed once otherwise.
    """
    text = (region or "").strip()
    if override_g_per_kwh is not None:
        return Intensity(_check_override(override_g_per_kwh), "override", None,
                         text or "any", "set by carbon_intensity_g_per_kwh")
    grid = grid if grid is not None else default_grid_data()
    if text.lower() in _NO_REGION:
        return _explained(_world(grid), "", ["no region given"])

    reasons: list[str] = []
    cloud, zone_note = find_region(text)
    if cloud is not None:
        head = f"{cloud.provider} {cloud.region} ({cloud.location})"
        if zone_note:
            head = f"{zone_note}; {head}"
        if cloud.provider == "gcp":
            gcp = grid.gcp_regions.get(cloud.region)
            if gcp is not None:
                found = Intensity(gcp.g_per_kwh, "codecarbon:gcp-impact", None,
                                  f"gcp:{cloud.region}",
                                  f"Google's published figure ({gcp.source_url})")
                return _explained(found, head, [])
            reasons.append("not in codecarbon's GCP impact.csv")
        if cloud.subdivision:
            found = _subdivision(grid, cloud.subdivision)
            if found is not None:
                return _explained(found, head, reasons)
            reasons.append(f"no data for {cloud.subdivision}")
        found = _country(grid, cloud.country_iso3)
        if found is not None:
            return _explained(found, head, reasons)
        reasons.append(f"no data for country {cloud.country_iso3}")
        return _explained(_world(grid), head, reasons)

    upper = text.upper()
    subdivision = _US_OR_CA_SUBDIVISION.match(upper)
    if subdivision is not None:
        found = _subdivision(grid, upper)
        if found is not None:
            return found
        reasons.append(f"no data for {upper}")
        country = _COUNTRY_OF_PREFIX[subdivision.group(1)]
        found = _country(grid, country)
        if found is not None:
            return _explained(found, "", reasons)
        reasons.append(f"no data for country {country}")
        return _explained(_world(grid), "", reasons)
    if _ISO3.match(upper):
        found = _country(grid, upper)
        if found is not None:
            return found
        reasons.append(f"no data for country {upper}")
        return _explained(_world(grid), "", reasons)
    reasons.append(f"unknown region {text!r}")
    return _explained(_world(grid), "", reasons)
