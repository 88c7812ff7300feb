"""Bounds from sources (joulestat.reports.bounds), the models' measured error
(joulestat.reports.model_error) and the uncertainty of a comparison's rows."""

from __future__ import annotations

import pytest

from joulestat.carbon.pricing import NodeFigures
from joulestat.core import units
from joulestat.reports.bounds import (
    ATTRIBUTION,
    FILLED,
    RAPL,
    Basis,
    SourcePart,
    accuracy_of,
    chain_accuracy,
    energy_bounds,
    job_bounds,
    total_bounds,
)
from joulestat.reports.compare.table import JobFigures, compare
from joulestat.reports.model_error import estimator_error, validation_points


def test_each_source_has_its_accuracy_or_none() -> None:
    assert accuracy_of("rapl") == RAPL and RAPL.low == -0.05 and RAPL.high == 0.05
    assert accuracy_of("fill:rapl") == FILLED and FILLED.basis is Basis.ASSUMED
    assert accuracy_of("nvml_power", ["NVIDIA A10G"]).high == pytest.approx(0.05)
    # A100/H100 sample power a quarter of the time: no bound anyone measured
    assert accuracy_of("nvml_power", ["NVIDIA H100 80GB HBM3"]) is None
    for vendor in ("amdsmi", "amdsmi_power", "hlml", "hlml_power", "neuron",
                   "model:neuron-util", "something-new"):
        assert accuracy_of(vendor) is None, vendor
    measured = accuracy_of("model:ccf-vcpu")
    assert measured is not None and measured.basis is Basis.MEASURED


def test_a_chain_is_its_originals_and_an_unstated_import_has_none() -> None:
    assert chain_accuracy("import:joulestat/rapl") == RAPL
    assert chain_accuracy("import:codecarbon") is None
    assert chain_accuracy("import:joulestat/amdsmi") is None
    mixed = chain_accuracy("rapl+fill:rapl")  # a minute whose source changed: the widest
    assert mixed is not None and (mixed.low, mixed.high) == (FILLED.low, FILLED.high)
    assert chain_accuracy("rapl+amdsmi") is None


def test_bounds_add_up_per_component_and_attribution_bounds_the_dynamic_part() -> None:
    found = energy_bounds([
        SourcePart("cpu", "rapl", 100.0, dynamic_j=40.0),
        SourcePart("cpu", "fill:rapl", 10.0),
        SourcePart("accelerator", "nvml_energy", 200.0, dynamic_j=200.0),
    ])
    cpu = found.components["cpu"]
    assert cpu.low == pytest.approx(100 * 0.95 - 40 * 0.025 + 0.0)
    assert cpu.high == pytest.approx(100 * 1.05 + 40 * 0.025 + 20.0)
    assert found.total.low == pytest.approx(cpu.low + 200 * (0.95 - 0.025))
    assert found.attribution == ATTRIBUTION and set(found.applied) == {
        "rapl", "fill:rapl", "nvml_energy"}
    node_only = energy_bounds([SourcePart("cpu", "rapl", 100.0, dynamic_j=40.0)],
                              attributed=False)
    assert node_only.total.as_list() == pytest.approx([95.0, 105.0])


def test_a_source_without_a_known_bound_makes_its_component_and_the_total_unknown() -> None:
    found = energy_bounds([SourcePart("cpu", "rapl", 100.0),
                           SourcePart("accelerator", "amdsmi", 50.0),
                           SourcePart("accelerator", "nvml_energy", 50.0),
                           SourcePart("dram", "import:codecarbon", 0.0)])
    assert found.components["accelerator"] is None and found.total is None
    assert found.components["cpu"] is not None
    assert found.components["dram"].as_list() == [0.0, 0.0]  # no energy: nothing unknown
    assert found.unknown == ("amdsmi",)
    assert found.as_json(["cpu", "dram", "accelerator"])["total"] is None


def test_a_jobs_total_bounds_alone_are_its_bounds_total_to_the_last_bit() -> None:
    """What a fleet's comparison reads per job (total_bounds) is job_bounds' total,
    exactly: unknown sources, components without a name of their own, parts without
    energy, device models that change an accuracy, several nodes."""
    from joulestat.store.provenance import JobSourceEnergy

    def row(node: str, component: str, source: str, dynamic_j: float, idle_j: float
            ) -> JobSourceEnergy:
        return JobSourceEnergy("j", node, component, source, dynamic_j, idle_j)

    models = {("n2", "nvml_power"): ("NVIDIA A10G",), ("n3", "nvml_power"): ("H100",)}
    jobs = [
        [row("n1", "cpu", "rapl", 40.1, 60.3), row("n1", "cpu", "fill:rapl", 0.0, 10.7),
         row("n1", "dram", "model:dram-gib", 3.3, 9.9),
         row("n1", "accelerator", "nvml_energy", 200.2, 31.0),
         row("n2", "accelerator", "nvml_power", 120.0, 7.5),
         row("n2", "gpu0", "rapl", 1.0, 2.0), row("n2", "platform", "rapl", 0.5, 0.0),
         row("n1", "net", "model:network", 0.01, 0.02),
         row("n2", "cpu", "import:joulestat/rapl+fill:rapl", 5.0, 1e-9)],
        [row("n1", "cpu", "model:ccf-vcpu", 0.0, 0.0), row("n1", "dram", "amdsmi", 0.0, 0.0),
         row("n1", "cpu", "rapl", -1.0, 0.5)],
        [row("n1", "cpu", "rapl", 10.0, 1.0), row("n3", "accelerator", "nvml_power", 5.0, 1.0)],
        [row("n1", "cpu", "import:codecarbon", 10.0, 1.0), row("n1", "cpu", "rapl", 1.0, 1.0)],
        [],
    ]
    for rows in jobs:
        assert total_bounds(rows, models) == job_bounds(rows, models).total, rows
    assert total_bounds(jobs[2], models) is None  # an H100's sampled power: unknown
    assert total_bounds(jobs[0], models) is not None


def test_the_models_error_is_measured_point_by_point_on_the_published_data() -> None:
    points = validation_points()
    assert len(points) == 20 and {p.instance for p in points} == {
        "c5.metal", "m5.metal", "r5.metal", "z1d.metal", "m5zn.metal"}
    ccf = estimator_error("ccf-vcpu")
    # c5.metal idle: 96 vCPU x 0.74 W (CCF's AWS minimum) against 57.93 W of RAPL
    assert ccf.errors[0] == pytest.approx(96 * 0.74 / 57.93 - 1)
    assert ccf.mape == pytest.approx(sum(abs(e) for e in ccf.errors) / 20)
    # the truth given the model's x: x / (1 + worst over) .. x / (1 + worst under)
    assert ccf.low == pytest.approx(1 / (1 + max(ccf.errors)) - 1)
    assert ccf.high == pytest.approx(1 / (1 + min(ccf.errors)) - 1)
    tdp = estimator_error("tdp-curve")  # only CPUs in the TDP table (not m5zn's 8252C)
    assert "m5zn.metal" not in tdp.instances and len(tdp.errors) == 16
    assert estimator_error("dram-gib").mape > 0.3
    assert estimator_error("network") is None


def test_ranges_are_written_in_one_unit_where_they_share_it() -> None:
    assert units.energy_range(20_100, 28_900) == "20.1\u201328.9 kJ"
    assert units.energy_range(950, 1_200) == "950 J\u20131.20 kJ"
    assert units.mass_range(11.2, 15.9) == "11.2\u201315.9 g"
    assert units.energy_range(None, 3.0) == units.UNKNOWN


def _figures(job_id: str, energy_j: float, bounds: tuple[float, float] | None,
             name: str = "run") -> JobFigures:
    return JobFigures(job_id=job_id, name=name, kind="inference",
                      nodes=(NodeFigures("n", "g5.xlarge", 3600.0, energy_j, 1.0),),
                      units={"inference": 100.0}, duration_s=3600.0, energy_j=energy_j,
                      operational_co2e_g=energy_j / 10, embodied_co2e_g=None, cost_usd=1.0,
                      energy_bounds_j=bounds)


def test_one_run_without_bounds_cannot_be_judged_and_with_bounds_can() -> None:
    unknown = compare([_figures("a", 100.0, None), _figures("b", 300.0, None)])
    assert unknown.rows[1].energy_distinguishable is None
    assert unknown.rows[1].runs_spread_j is None and unknown.rows[1].interval_j is None
    bounded = compare([_figures("a", 100.0, (95.0, 105.0)),
                       _figures("b", 300.0, (285.0, 315.0)),
                       _figures("c", 104.0, (98.8, 109.2))])
    assert bounded.rows[1].energy_distinguishable is True
    assert bounded.rows[2].energy_distinguishable is False
    assert bounded.rows[0].energy_distinguishable is None  # the baseline itself
