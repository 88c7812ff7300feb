"""Where each cloud region is: country, state/province, Electricity Maps zone.

Loaded once from ``agent/data/cloud_regions.csv`` (sources in its header). Region codes
are unique across AWS, GCP and Azure (``us-east-1`` vs ``us-east1`` vs ``eastus``), so a
region string alone says which provider it belongs to. Lookups also accept an availability
zone (``us-east-1a``, ``us-central1-a``) and Azure display names (``East US``), because
that is what metadata services and users type.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from joulestat.carbon.datafiles import load_table

PROVIDERS = ("aws", "gcp", "azure")
_COLUMNS = ("provider", "region", "location", "country_iso3", "subdivision", "emaps_zone",
            "source", "date")
_AWS_AZ = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d+)[a-z]$")  # us-east-1a
_GCP_ZONE = re.compile(r"^([a-z]+(?:-[a-z]+)*\d+)-[a-z]$")  # us-central1-a
_ISO3 = re.compile(r"^[A-Z]{3}$")
_SUBDIVISION = re.compile(r"^[A-Z]{2}-[A-Z0-9]{1,3}$")


@dataclass(frozen=True, slots=True)
class CloudRegion:
    provider: str
    region: str
    location: str
    country_iso3: str
    subdivision: str | None  # ISO 3166-2, e.g. US-VA, CA-QC
    emaps_zone: str | None
    source: str
    date: str


def _key(region: str) -> str:
    return region.strip().lower().replace(" ", "")


def parse_regions(rows: list[dict[str, str]], origin: str) -> dict[str, CloudRegion]:
    """Validate table rows into regions keyed by lower-case code."""
    regions: dict[str, CloudRegion] = {}
    for number, row in enumerate(rows, start=1):
        where = f"{origin} row {number} ({row.get('region')!r})"
        if row["provider"] not in PROVIDERS:
            raise ValueError(f"{where}: provider must be one of {PROVIDERS}")
        if not _ISO3.match(row["country_iso3"]):
            raise ValueError(f"{where}: country_iso3 must be three capital letters")
        if row["subdivision"] and not _SUBDIVISION.match(row["subdivision"]):
            raise ValueError(f"{where}: subdivision must be ISO 3166-2 like US-VA")
        if not row["source"] or not row["date"]:
            raise ValueError(f"{where}: every row needs a source and a date")
        key = _key(row["region"])
        if key in regions:
            raise ValueError(f"{where}: region listed twice")
        regions[key] = CloudRegion(
            row["provider"], row["region"], row["location"], row["country_iso3"],
            row["subdivision"] or None, row["emaps_zone"] or None, row["source"], row["date"])
    return regions


def load_regions(path: Path | None = None) -> dict[str, CloudRegion]:
    """Parse the region table at ``path`` (default: the bundled one)."""
    return load_table(path, "cloud_regions.csv", _COLUMNS, parse_regions)


@functools.lru_cache(maxsize=1)
def default_regions() -> dict[str, CloudRegion]:
    """The bundled table, read once per process."""
    return load_regions()


def find_region(region: str | None) -> tuple[CloudRegion | None, str]:
    """The table row for ``region`` (or its zone) and a note when a zone was stripped."""
    if not region or not region.strip():
        return None, ""
    regions = default_regions()
    key = _key(region)
    if key in regions:
        return regions[key], ""
    for pattern in (_AWS_AZ, _GCP_ZONE):
        match = pattern.match(key)
        if match and match.group(1) in regions:
            return regions[match.group(1)], f"zone {region!r} read as region {match.group(1)!r}"
    return None, ""
