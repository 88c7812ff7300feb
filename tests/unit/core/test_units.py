"""The one number formatter (joulestat.core.units) and the one reading of a source chain
(joulestat.reports.sources), which the CLI, the dashboard and the reports all use."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr

import pytest

from joulestat.core import units
from joulestat.reports.sources import (
    energy_by_class,
    originals,
    source_class,
    sources_class,
)


def test_three_significant_digits_and_si_prefixes() -> None:
    # "0.002 J per sample" hid 2.05 vs 1.91 mJ, a 7 % difference
    assert units.energy(0.00205) == "2.05 mJ" and units.energy(0.00191) == "1.91 mJ"
    assert units.energy(312) == "312 J" and units.energy(4513) == "4.51 kJ"
    assert units.energy(999.7) == "1.00 kJ"  # rounded before the prefix is chosen
    assert units.energy(30_602_617) == "30.6 MJ" and units.energy(0) == "0 J"
    assert units.energy_wh(2.713e-4 * 3.6e6) == "271 mWh"  # was "2.713e-04 kWh"
    assert units.energy_wh(3.6e6 * 9.93) == "9.93 kWh"
    assert units.mass(1.58e-7) == "158 ng"  # was "gCO2e/sample 0.000000158"
    assert units.mass(0.00174) == "1.74 mg" and units.mass(13.4) == "13.4 g"
    assert units.mass(2410) == "2.41 kg" and units.mass(1.2e6) == "1.20 t"
    assert units.power(10.0) == "10.0 W"  # fleet power was "0.01 kW"
    assert units.power(1200) == "1.20 kW" and units.power(0.85) == "850 mW"
    assert units.sig(0.0282) == "0.0282" and units.sig(0.02) == "0.0200"  # never "0.02"
    assert units.count(950) == "950" and units.count(30_809) == "30.8 k"
    assert units.share(0.11) == "11 %" and units.share(0.005) == "0.50 %"
    assert units.duration(61.4) == "1 min 01 s" and units.duration(5) == "5.0 s"


def test_money_and_unknowns() -> None:
    assert units.usd(74.234) == "$74.23" and units.usd(1234.4) == "$1,234"
    assert units.usd(0.377) == "$0.377" and units.usd(0.00562) == "$0.00562"
    assert "e-" not in units.usd(5.621e-9)  # was "5.621e-09 USD"
    for unknown in (None, math.nan, math.inf):
        for shown in (units.energy(unknown), units.mass(unknown), units.usd(unknown),
                      units.power(unknown), units.count(unknown), units.share(unknown)):
            assert shown == units.UNKNOWN


def test_no_exponent_anywhere() -> None:
    for value in (1e-14, 3.3e-9, 7.7e-5, 0.5, 12, 9.99e5, 4.2e11, 8.8e13):
        for shown in (units.energy(value), units.mass(value), units.power(value),
                      units.usd(value), units.count(value), units.energy_wh(value)):
            assert "e-" not in shown and "e+" not in shown, shown


def test_scale_for_charts() -> None:
    assert units.scale_for([0.002, 0.0019], "J") == (0.001, "mJ")
    assert units.scale_for([1.5e-7], "g") == (1e-9, "ng")
    assert units.scale_for([14.2, 3000], "W") == (1000.0, "kW")


def test_the_dashboard_formats_through_the_same_module() -> None:
    from joulestat.dashboard import fmt

    assert fmt.energy is units.energy and fmt.mass is units.mass and fmt.usd is units.usd
    assert fmt.kwh(1800) == units.energy_wh(1800) == "500 mWh"


def test_run_summary_prints_readable_energy_per_unit() -> None:
    from joulestat.cli.run import _print_summary

    out = io.StringIO()
    summary = {"name": "mlp", "id": "j1", "mode": "through the agent", "started_at": 1.0,
               "ended_at": 11.0, "energy_j": {"cpu": 4.1}, "total_energy_j": 4.1,
               "dynamic_energy_j": 3.0, "idle_energy_j": 1.1, "units": {"sample": 2000}}
    with redirect_stderr(out):
        _print_summary(summary, ["python", "x.py"], 0, False)
    text = out.getvalue()
    assert "2.05 mJ per sample" in text, text  # was "0.002 J per sample"
    assert "energy 4.10 J (cpu 4.10 J)" in text


@pytest.mark.parametrize(("source", "expected"), [
    ("rapl", "measured"), ("nvml_energy+nvml_power", "measured"),
    ("model:tdp-curve", "estimated"), ("replay", "replay"),
    ("model:tdp-curve+rapl", "mixed"),
    # an import keeps its original source: an imported estimate is an estimate
    ("import:joulestat/model:ccf-vcpu", "estimated"),
    ("import:joulestat/model:ccf-vcpu,rapl", "mixed"),
    ("import:joulestat/rapl", "measured"),
    # a CodeCarbon CSV does not say whether its CPU figure was RAPL or its TDP fallback
    ("import:codecarbon", "unstated"), ("import:joulestat", "unstated"),
    ("import:codecarbon/nvml_energy", "measured"),
    ("import:codecarbon/model:codecarbon-ram", "estimated"),
    ("import:joulestat/import:codecarbon", "unstated"),
    ("something-new", "unstated"),
    # ticks of a faulty counter, filled from its recent power
    ("fill:rapl", "estimated"), ("rapl+fill:rapl", "mixed"),
])
def test_source_classes(source: str, expected: str) -> None:
    assert source_class(source) == expected


def test_classes_of_several_sources_and_energy() -> None:
    assert originals("import:joulestat/model:a,rapl") == ["model:a", "rapl"]
    assert sources_class(["rapl", "nvml_energy"]) == "measured"
    assert sources_class(["rapl", "import:codecarbon"]) == "mixed"
    assert energy_by_class({"rapl": 3.0, "import:joulestat/model:ccf-vcpu": 1.0,
                            "import:codecarbon": 2.0}) == {
        "measured": 3.0, "estimated": 1.0, "unstated": 2.0}
