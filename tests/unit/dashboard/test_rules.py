"""The dashboard's rules on figures given to them, no store: costs of an unknown
instance type, provenance classes, the CPU-bottleneck flag, formatting."""

from __future__ import annotations

import pytest

from joulestat.dashboard import analysis, costing, fmt
from joulestat.store.provenance import SourceEnergy
from joulestat.store.series import SeriesPoint


def test_unknown_instance_type_gives_unknown_cost_not_zero():
    cost = costing.node_cost("local", "", 3_600_000.0, 3600.0)
    assert cost.cost_usd is None and cost.embodied_g is None and cost.total_g is None
    assert cost.operational_g and cost.operational_g > 0  # world-average intensity


def test_provenance_classes():
    assert analysis.provenance_class("rapl") == "measured"
    assert analysis.provenance_class("model:tdp-curve") == "estimated"
    assert analysis.provenance_class("replay") == "replay"
    assert analysis.provenance_class("model:tdp-curve+rapl") == "mixed"
    assert analysis.provenance_class("nvml_energy+nvml_power") == "measured"
    rows = [SourceEnergy("n", "cpu", "rapl", 3.0), SourceEnergy("n", "platform", "rapl",
                                                                        9.0),
            SourceEnergy("n", "dram", "model:dram-gib", 1.0)]
    assert analysis.provenance_totals(rows) == {"measured": 3.0, "estimated": 1.0}


def series(cpu_w: float, gpu_w: float, buckets: int = 10) -> list[SeriesPoint]:
    return [SeriesPoint(float(b), "n", c, w * 60, 0.0, 60.0)
            for b in range(buckets) for c, w in (("cpu", cpu_w), ("accelerator", gpu_w))]


def test_cpu_bottleneck_flag():
    ranges = {"cpu": (20.0, 100.0), "accelerator": (60.0, 300.0)}
    starved = analysis.cpu_bottleneck("n", series(cpu_w=97, gpu_w=80), ranges)
    assert starved.state == "cpu-bound" and starved.flagged_share == 1.0
    assert starved.cpu_load == pytest.approx(77 / 80)
    assert analysis.cpu_bottleneck("n", series(cpu_w=50, gpu_w=280), ranges).state == "ok"
    assert analysis.cpu_bottleneck("n", series(cpu_w=97, gpu_w=280), ranges).state == "ok"
    assert analysis.cpu_bottleneck("n", series(50, 80), {"cpu": (20, 100)}).state == (
        "no-accelerator")
    assert analysis.cpu_bottleneck("n", series(50, 80), {
        "cpu": (20, 21), "accelerator": (60, 300)}).state == "unknown"
    half = series(97, 80, 2) + series(50, 280, 8)
    assert analysis.cpu_bottleneck("n", half, ranges).state == "ok"  # under a quarter


def test_formatting():
    """The pages format through joulestat.core.units (rules: tests/unit/core/test_units.py)."""
    assert fmt.energy(312) == "312 J" and fmt.energy(4513) == "4.51 kJ"
    assert fmt.energy(30_602_617) == "30.6 MJ" and fmt.energy(0.00205) == "2.05 mJ"
    assert fmt.kwh(3_600_000 * 9.93) == "9.93 kWh" and fmt.kwh(1800) == "500 mWh"
    assert fmt.mass(13.4) == "13.4 g" and fmt.mass(2410) == "2.41 kg"
    assert fmt.mass(None) == fmt.UNKNOWN
    assert fmt.usd(74.23) == "$74.23" and fmt.usd(0.377) == "$0.377"
    assert fmt.usd(None) == fmt.UNKNOWN
    assert fmt.count(30_809) == "30.8 k" and fmt.count(950) == "950"
    assert fmt.plural("request") == "requests" and fmt.plural("units") == "units"

