"""Grid-intensity resolution against the real tables: CodeCarbon 3.3.2's, shipped in
joulestat's package data (agent/data/codecarbon).

Expected values are computed here from the JSON/CSV files themselves (read independently
of joulestat.carbon), so a wrong key, unit or fallback in the resolver shows up as a mismatch.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from joulestat.carbon.codecarbon_data import load_grid_data
from joulestat.carbon.intensity import Intensity, resolve_intensity
from joulestat.carbon.regions import default_regions, load_regions

LB_G = 453.59237  # grams per avoirdupois pound
CC_DATA = Path(__file__).resolve().parents[3] / "agent" / "data" / "codecarbon"


@pytest.fixture(scope="module")
def cc_data() -> Path:
    assert (CC_DATA / "private_infra").is_dir()
    return CC_DATA


@pytest.fixture(scope="module")
def energy_mix(cc_data: Path) -> dict:
    return json.loads((cc_data / "private_infra" / "global_energy_mix.json").read_text())


@pytest.fixture(scope="module")
def usa(cc_data: Path) -> dict:
    return json.loads((cc_data / "private_infra" / "2023" / "usa_emissions.json").read_text())


@pytest.fixture(scope="module")
def gcp_impact(cc_data: Path) -> dict[str, float]:
    text = (cc_data / "cloud" / "impact.csv").read_text(encoding="utf-8-sig")
    return {row["region"]: float(row["impact"]) for row in csv.DictReader(io.StringIO(text))}


@pytest.fixture(scope="module")
def world_average(cc_data: Path) -> float:
    data = json.loads((cc_data / "private_infra" / "carbon_intensity_per_source.json")
                      .read_text())
    return float(data["world_average"])


def test_gcp_region_uses_googles_published_figure(gcp_impact: dict[str, float]) -> None:
    found = resolve_intensity("europe-west4")
    assert found.g_per_kwh == gcp_impact["europe-west4"]
    assert found.source == "codecarbon:gcp-impact"
    assert found.location == "gcp:europe-west4"
    assert "Eemshaven" in found.note


def test_gcp_zone_is_read_as_its_region(gcp_impact: dict[str, float]) -> None:
    found = resolve_intensity("us-central1-a")
    assert found.g_per_kwh == gcp_impact["us-central1"]
    assert "zone 'us-central1-a' read as region 'us-central1'" in found.note


def test_aws_us_region_uses_its_states_egrid_rate_converted(usa: dict) -> None:
    lbs_per_mwh = usa["virginia"]["emissions"]
    assert usa["_unit"]["emissions"] == "lbs/MWh"
    found = resolve_intensity("us-east-1")
    assert found.g_per_kwh == pytest.approx(lbs_per_mwh * LB_G / 1000, rel=1e-12)
    assert found.source == "codecarbon:usa-egrid2023:VA"
    assert found.year == usa["_source"]["year"] == 2023
    assert found.location == "US-VA"
    assert found.note.startswith("aws us-east-1 (N. Virginia): US state VA")
    # The availability zone and the Azure region in the same state agree.
    assert resolve_intensity("us-east-1a").g_per_kwh == found.g_per_kwh
    assert resolve_intensity("eastus").g_per_kwh == found.g_per_kwh
    assert resolve_intensity("East US").g_per_kwh == found.g_per_kwh
    assert resolve_intensity("US-VA").g_per_kwh == found.g_per_kwh


def test_oregon_region_uses_oregons_rate(usa: dict) -> None:
    found = resolve_intensity("us-west-2")
    assert found.g_per_kwh == pytest.approx(usa["oregon"]["emissions"] * LB_G / 1000)
    assert found.source == "codecarbon:usa-egrid2023:OR"


@pytest.mark.parametrize("region, iso3", [("eu-west-3", "FRA"), ("westeurope", "NLD"),
                                          ("eu-central-1", "DEU"), ("ap-northeast-1", "JPN")])
def test_non_us_cloud_region_uses_its_country(energy_mix: dict, region: str, iso3: str) -> None:
    found = resolve_intensity(region)
    assert found.g_per_kwh == energy_mix[iso3]["carbon_intensity"]
    assert found.year == energy_mix[iso3]["year"]
    assert found.source == f"codecarbon:energy-mix:{iso3}"
    assert found.location == iso3


def test_gcp_region_missing_from_impact_csv_falls_back_to_country(
        energy_mix: dict, gcp_impact: dict[str, float]) -> None:
    assert "europe-north2" not in gcp_impact
    found = resolve_intensity("europe-north2")
    assert found.g_per_kwh == energy_mix["SWE"]["carbon_intensity"]
    assert "not in codecarbon's GCP impact.csv" in found.note
    assert found.note.endswith("country SWE (Sweden)")


def test_iso3_country_code(energy_mix: dict) -> None:
    for text in ("FRA", "fra", " FRA "):
        assert resolve_intensity(text).g_per_kwh == energy_mix["FRA"]["carbon_intensity"]


def test_canadian_province_weights_its_mix_by_lifecycle_factors(cc_data: Path) -> None:
    mix = json.loads((cc_data / "private_infra" / "2023" / "canada_energy_mix.json")
                     .read_text())["quebec"]
    factors = json.loads((cc_data / "private_infra" / "carbon_intensity_per_source.json")
                         .read_text())
    names = {"naturalGas": "natural_gas", "petroleum": "petroleum", "coal": "coal",
             "nuclear": "nuclear", "hydro": "hydroelectricity", "wind": "wind",
             "solar": "solar", "biomass": "biomass"}
    expected = sum(mix[k] * factors[v] for k, v in names.items()) / mix["total"]
    found = resolve_intensity("CA-QC")
    assert found.g_per_kwh == pytest.approx(expected)
    assert found.source == "codecarbon:canada-mix2023:QC"
    assert 20 < found.g_per_kwh < 40  # mostly hydro at 26 g/kWh lifecycle
    assert resolve_intensity("ca-central-1").g_per_kwh == found.g_per_kwh


def test_unknown_state_falls_back_to_country(energy_mix: dict) -> None:
    found = resolve_intensity("US-ZZ")
    assert found.g_per_kwh == energy_mix["USA"]["carbon_intensity"]
    assert found.note == "no data for US-ZZ: country USA (United States)"


@pytest.mark.parametrize("region, reason", [
    ("xx-1", "unknown region 'xx-1'"),
    ("XYZ", "no data for country XYZ"),
    (None, "no region given"),
    ("", "no region given"),
    ("local", "no region given"),
])
def test_unknown_region_falls_back_to_world_average_and_says_so(
        world_average: float, region: str | None, reason: str) -> None:
    found = resolve_intensity(region)
    assert found.g_per_kwh == world_average
    assert found.source == "codecarbon:world-average"
    assert found.location == "world"
    assert found.note.startswith(f"{reason}: world average")


def test_override_wins_over_every_table() -> None:
    for region in ("us-east-1", "europe-west4", None):
        found = resolve_intensity(region, override_g_per_kwh=123.5)
        assert (found.g_per_kwh, found.source) == (123.5, "override")
    with pytest.raises(ValueError, match="override"):
        resolve_intensity("us-east-1", override_g_per_kwh=-1)


def _resolve_without(root: Path, data_file: str, key: str) -> Intensity:
    """us-east-1 resolved after ``key`` is removed from a data file of the copy at ``root``
    (removals add up: each call works on what the last one left)."""
    path = root / "private_infra" / data_file
    data = json.loads(path.read_text())
    del data[key]
    path.write_text(json.dumps(data))
    return resolve_intensity("us-east-1", grid=load_grid_data(root))


def test_fallback_chain_state_then_country_then_world(tmp_path: Path, cc_data: Path) -> None:
    """With Virginia removed, us-east-1 falls back to the USA; with the USA removed too,
    to the world average, and the note keeps every step."""
    root = tmp_path / "codecarbon"
    shutil.copytree(cc_data, root)
    found = _resolve_without(root, "2023/usa_emissions.json", "virginia")
    assert found.source == "codecarbon:energy-mix:USA"
    assert found.note == ("aws us-east-1 (N. Virginia): no data for US-VA: "
                          "country USA (United States)")

    found = _resolve_without(root, "global_energy_mix.json", "USA")
    assert found.source == "codecarbon:world-average"
    assert found.note.startswith("aws us-east-1 (N. Virginia): no data for US-VA; "
                                 "no data for country USA: world average")


def test_every_listed_region_resolves_without_reaching_the_world_average(
        energy_mix: dict, usa: dict) -> None:
    states = {row["regionCode"] for k, row in usa.items() if not k.startswith("_")}
    for key, region in default_regions().items():
        assert region.country_iso3 in energy_mix, key
        if region.subdivision and region.subdivision.startswith("US-"):
            assert region.subdivision[3:] in states, key
        assert resolve_intensity(key).source != "codecarbon:world-average", key


def test_region_table_covers_the_three_providers() -> None:
    regions = default_regions()
    by_provider = {p: {r.region for r in regions.values() if r.provider == p}
                   for p in ("aws", "gcp", "azure")}
    assert {"us-east-1", "us-west-2", "eu-west-3", "ap-northeast-1", "ap-south-1",
            "sa-east-1", "ca-central-1", "eu-north-1", "me-central-1"} <= by_provider["aws"]
    assert len(by_provider["aws"]) >= 34
    assert {"us-central1", "europe-west4", "asia-northeast1"} <= by_provider["gcp"]
    assert {"eastus", "westeurope", "northeurope", "swedencentral"} <= by_provider["azure"]


def test_region_table_rejects_rows_without_source(tmp_path: Path) -> None:
    path = tmp_path / "regions.csv"
    path.write_text("# comment\nprovider,region,location,country_iso3,subdivision,emaps_zone,"
                    "source,date\naws,xx-east-1,Nowhere,USA,,,,2025\n")
    with pytest.raises(ValueError, match="source and a date"):
        load_regions(path)
    path.write_text("provider,region,location,country_iso3,subdivision,emaps_zone,source,date\n"
                    "aws,xx-east-1,Nowhere,US,,,x,2025\n")
    with pytest.raises(ValueError, match="three capital letters"):
        load_regions(path)
