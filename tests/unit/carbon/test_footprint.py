"""footprint(): a multi-node job hand-computed from the data files, overrides, unknowns."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from joulestat.carbon.catalog import lookup
from joulestat.carbon.footprint import (
    CarbonSettings,
    NodePlacement,
    energy_points,
    footprint,
)
from joulestat.carbon.pricing import placements
from joulestat.store.jobs import JobDetail, JobNodePart

J_PER_KWH = 3.6e6
FOUR_YEARS_S = 4 * 365.25 * 86400
CC_DATA = Path(__file__).resolve().parents[3] / "agent" / "data" / "codecarbon"


def _virginia_g_per_kwh() -> float:
    usa = json.loads((CC_DATA / "private_infra/2023/usa_emissions.json").read_text())
    return usa["virginia"]["emissions"] * 453.59237 / 1000  # lb/MWh -> g/kWh


def _gcp_impact(region: str) -> float:
    text = (CC_DATA / "cloud/impact.csv").read_text(encoding="utf-8-sig")
    return next(float(r["impact"]) for r in csv.DictReader(io.StringIO(text))
                if r["region"] == region)


def _world_average() -> float:
    return float(json.loads((CC_DATA / "private_infra/carbon_intensity_per_source.json")
                            .read_text())["world_average"])


SERIES = [
    # (t_end_s, node, energy_j): a GPU node per tick, a CPU node per minute
    (1000.0, "gpu-0", 1.8e6), (1001.0, "gpu-0", 3.6e6), (1002.0, "gpu-0", 0.9e6),
    (1060.0, "cpu-0", 0.36e6), (1120.0, "cpu-0", 0.36e6),
]
PLACEMENTS = {
    "gpu-0": NodePlacement("p4d.24xlarge", "us-east-1", 7200.0),
    "cpu-0": NodePlacement("n2-standard-8", "europe-west4", 5400.0),
}


def test_two_instance_types_in_two_regions_hand_computed() -> None:
    gpu_kwh = (1.8e6 + 3.6e6 + 0.9e6) / J_PER_KWH  # 1.75 kWh
    cpu_kwh = 0.72e6 / J_PER_KWH  # 0.2 kWh
    gpu_op = gpu_kwh * 1.135 * _virginia_g_per_kwh()  # AWS PUE, eGRID Virginia
    cpu_op = cpu_kwh * 1.1 * _gcp_impact("europe-west4")  # GCP PUE, Google's figure
    p4d, n2 = lookup("p4d.24xlarge"), lookup("n2-standard-8")
    assert p4d is not None and n2 is not None
    gpu_emb = p4d.embodied_kgco2e * 1000 * 7200 / FOUR_YEARS_S * 96 / 96
    cpu_emb = n2.embodied_kgco2e * 1000 * 5400 / FOUR_YEARS_S * 8 / 128
    cost = p4d.usd_per_hour * 2 + n2.usd_per_hour * 1.5

    result = footprint(SERIES, PLACEMENTS, CarbonSettings())

    assert result.energy_kwh == pytest.approx(gpu_kwh + cpu_kwh)
    assert result.operational_co2e_g == pytest.approx(gpu_op + cpu_op)
    assert result.embodied_co2e_g == pytest.approx(gpu_emb + cpu_emb)
    assert result.total_co2e_g == pytest.approx(gpu_op + cpu_op + gpu_emb + cpu_emb)
    assert result.cost_usd == pytest.approx(cost)
    assert result.notes == ()
    by_node = {n.node: n for n in result.nodes}
    assert [n.node for n in result.nodes] == ["cpu-0", "gpu-0"]
    gpu = by_node["gpu-0"]
    assert gpu.energy_kwh == pytest.approx(gpu_kwh)
    assert gpu.operational_co2e_g == pytest.approx(gpu_op)
    assert gpu.intensity.source == "codecarbon:usa-egrid2023:VA"
    assert gpu.pue.value == 1.135 and gpu.pue.provider == "aws"
    assert gpu.cost_usd == pytest.approx(p4d.usd_per_hour * 2)
    cpu = by_node["cpu-0"]
    assert cpu.intensity.source == "codecarbon:gcp-impact"
    assert cpu.pue.value == 1.1
    assert cpu.embodied.g == pytest.approx(cpu_emb)
    assert cpu.live_intensity is None and cpu.live_energy_kwh == 0.0
    assert "SCI" in result.methodology and "PUE" in result.methodology


def test_overrides_apply_to_every_node() -> None:
    settings = CarbonSettings(carbon_intensity_g_per_kwh=100.0, pue=1.5, price_per_hour_usd=2.0)
    result = footprint(SERIES, PLACEMENTS, settings)
    total_kwh = (1.8e6 + 3.6e6 + 0.9e6 + 0.72e6) / J_PER_KWH
    assert result.operational_co2e_g == pytest.approx(total_kwh * 1.5 * 100.0)
    assert result.cost_usd == pytest.approx(2.0 * 2 + 2.0 * 1.5)
    assert {n.intensity.source for n in result.nodes} == {"override"}
    assert {n.pue.source for n in result.nodes} == {"override"}


def test_one_unknown_instance_makes_cost_and_embodied_unknown_and_names_the_node() -> None:
    placements = dict(PLACEMENTS, **{"cpu-0": NodePlacement("onprem-dgx", "FRA", 5400.0)})
    result = footprint(SERIES, placements)
    assert result.cost_usd is None
    assert result.embodied_co2e_g is None and result.total_co2e_g is None
    assert any(n.startswith("cost unknown for node cpu-0: instance type 'onprem-dgx'")
               for n in result.notes)
    assert any("embodied emissions unknown for node(s) cpu-0" in n for n in result.notes)
    # Operational emissions are still known: FRA's country figure, PUE 1.0 (no provider).
    cpu = next(n for n in result.nodes if n.node == "cpu-0")
    assert cpu.intensity.source == "codecarbon:energy-mix:FRA"
    assert cpu.pue.value == 1.0
    assert cpu.operational_co2e_g == pytest.approx(0.2 * 1.0 * cpu.intensity.g_per_kwh)
    assert result.operational_co2e_g > cpu.operational_co2e_g


def test_node_with_energy_but_no_placement_uses_world_average() -> None:
    result = footprint([(10.0, "mystery", 3.6e6)], {})
    node = result.nodes[0]
    assert node.operational_co2e_g == pytest.approx(1.0 * 1.0 * _world_average())
    assert node.intensity.source == "codecarbon:world-average"
    assert result.cost_usd is None
    assert any("node 'mystery' has no placement" in n for n in result.notes)


def test_placement_without_energy_still_costs_its_reserved_time() -> None:
    result = footprint([], {"idle": NodePlacement("m5.large", "us-east-1", 3600.0)})
    spec = lookup("m5.large")
    assert spec is not None
    assert result.operational_co2e_g == 0.0
    assert result.cost_usd == pytest.approx(spec.usd_per_hour)
    assert result.embodied_co2e_g == pytest.approx(
        spec.embodied_kgco2e * 1000 * 3600 / FOUR_YEARS_S * 2 / 96)


def test_negative_energy_is_rejected() -> None:
    with pytest.raises(ValueError, match="energy"):
        footprint([(1.0, "a", -5.0)], {})


def test_adapters_from_the_store_shapes() -> None:
    parts = (
        JobNodePart("gpu-0", "p4d.24xlarge", "us-east-1", 100.0, 7300.0, (1,), {}, {}, 0.0, {}),
        JobNodePart("cpu-0", "n2-standard-8", "europe-west4", 200.0, None, (2,), {}, {}, 0.0, {}),
    )
    detail = JobDetail("j", "j", "run", {}, "running", 100.0, None, (), {}, {}, 0.0, {},
                       per_node=parts)
    assert placements(detail.per_node, now_s=5600.0) == {
        "gpu-0": NodePlacement("p4d.24xlarge", "us-east-1", 7200.0),
        "cpu-0": NodePlacement("n2-standard-8", "europe-west4", 5400.0),
    }
    rows = [(1000.0, "cpu", 1.0e6, 0.8e6), (1000.0, "accelerator", 2.0e6, 1.6e6),
            (1001.0, "cpu", 0.5e6, 0.4e6)]
    assert energy_points("gpu-0", rows) == [(1000.0, "gpu-0", 5.4e6), (1001.0, "gpu-0", 0.9e6)]
