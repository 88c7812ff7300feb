"""compare(): per-unit ratios, pooling, multi-node jobs, per-run rows, SLA sizing, energy
above idle with its idle policy, and the rows by model.

Every expected value is worked out by hand in the test from the inputs (prices from the
bundled catalog via ``catalog.lookup``), never from compare() itself.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from joulestat.carbon.catalog import lookup
from joulestat.reports.compare.by_model import by_model
from joulestat.reports.compare.groups import CompareError, setup_name
from joulestat.reports.compare.table import JobFigures, NodeFigures, compare, rebase
from joulestat.reports.compare.words import (
    as_json,
    format_pct,
    format_ratio,
    headline,
    render_text,
)
from joulestat.reports.idle import policy_words
from joulestat.store.model_split import ModelShare, ModelSplit

H = 3600.0
G_PER_J = 400 / 3_600_000  # 400 gCO2e/kWh, PUE 1.0: grams per joule


def price(instance_type: str) -> float:
    spec = lookup(instance_type)
    assert spec is not None and spec.usd_per_hour is not None, instance_type
    return spec.usd_per_hour


G5, INF2, P4D, C6I = (price(t) for t in ("g5.xlarge", "inf2.xlarge", "p4d.24xlarge",
                                         "c6i.4xlarge"))


def figures(job_id: str, nodes: list[tuple[str, float, float]], units: dict[str, float],
            name: str | None = None, kind: str = "inference",
            embodied_g: float | None = 1.0) -> JobFigures:
    """A job from ``(instance_type, held_s, energy_j)`` per node, priced from the catalog
    (None where the catalog has no price), CO2e at 400 g/kWh."""
    parts = []
    for n, (itype, held_s, energy_j) in enumerate(nodes):
        spec = lookup(itype)
        usd_h = spec.usd_per_hour if spec is not None else None
        parts.append(NodeFigures(f"{job_id}-n{n}", itype, held_s, energy_j,
                                 None if usd_h is None else usd_h * held_s / H))
    costs = [p.cost_usd for p in parts]
    energy = sum(p.energy_j for p in parts)
    return JobFigures(
        job_id=job_id, name=name or job_id, kind=kind, nodes=tuple(parts), units=units,
        duration_s=max(p.held_s for p in parts), energy_j=energy,
        operational_co2e_g=energy * G_PER_J, embodied_co2e_g=embodied_g,
        cost_usd=None if None in costs else sum(c for c in costs if c is not None))


# g5.xlarge: 1 h held, 360 kJ (100 W), 10 000 inferences.
# inf2.xlarge: 0.5 h held, 90 kJ (50 W), 31 500 inferences = 63 000 per instance-hour.
ON_G5 = figures("g5-run", [("g5.xlarge", H, 360_000.0)], {"inference": 10_000})
ON_INF2 = figures("inf2-run", [("inf2.xlarge", 0.5 * H, 90_000.0)], {"inference": 31_500})


def test_two_instance_types_per_inference_against_the_first() -> None:
    table = compare([ON_G5, ON_INF2])
    assert (table.unit, table.baseline, table.by) == ("inference", "g5-run", "job")
    g5, inf2 = table.rows
    assert g5.is_baseline and not inf2.is_baseline
    assert (g5.job, g5.job_id, g5.group, g5.basis) == ("g5-run", "g5-run", "g5.xlarge", "unit")

    assert g5.units_per_hour == pytest.approx(10_000 / 1.0)
    assert inf2.units_per_hour == pytest.approx(31_500 / 0.5)  # 63 000 /instance-h
    assert g5.energy_per_unit_j == pytest.approx(360_000 / 10_000)  # 36 J
    assert inf2.energy_per_unit_j == pytest.approx(90_000 / 31_500)  # 2.857 J
    # 360 kJ = 0.1 kWh x 400 g/kWh = 40 g over 10 000 inferences
    assert g5.co2e_per_unit_g == pytest.approx(40 / 10_000)
    assert inf2.co2e_per_unit_g == pytest.approx(10 / 31_500)  # 0.025 kWh x 400 = 10 g
    assert g5.cost_per_unit_usd == pytest.approx(G5 * 1.0 / 10_000)
    assert g5.cost_per_million_usd == pytest.approx(G5 / 10_000 * 1e6)  # 100.60 USD
    assert inf2.cost_per_million_usd == pytest.approx(INF2 * 0.5 / 31_500 * 1e6)  # 12.03
    assert (g5.energy_per_run_j, inf2.energy_per_run_j) == (360_000.0, 90_000.0)
    assert g5.power_per_instance_w == pytest.approx(360_000 / 3600)  # 100 W

    assert (g5.throughput_x, g5.energy_pct, g5.cost_pct) == (1.0, 0.0, 0.0)
    assert inf2.throughput_x == pytest.approx(63_000 / 10_000)  # x6.3
    assert inf2.energy_pct == pytest.approx((90_000 / 31_500 / 36 - 1) * 100)  # -92.06 %
    assert inf2.energy_pct == pytest.approx(-92.063, abs=1e-3)
    assert inf2.co2e_pct == pytest.approx(((10 / 31_500) / (40 / 10_000) - 1) * 100)
    assert inf2.cost_pct == pytest.approx(((INF2 * 0.5 / 31_500) / (G5 / 10_000) - 1) * 100)
    assert inf2.instances_needed is None and inf2.fleet_power_w is None  # no --sla

    assert headline(inf2, g5) == (
        "\u00d76.3 throughput, \u221292 % energy per inference (1 run, spread unknown), "
        "\u221292 % CO2e per inference, $12.03 vs $100.60 per million inferences")


def test_sla_sizing_rounds_instances_up() -> None:
    table = compare([ON_G5, ON_INF2], sla_units_per_hour=100_000)
    g5, inf2 = table.rows
    # 100 000 / 10 000 = 10 instances exactly; 100 000 / 63 000 = 1.59 -> 2
    assert (g5.instances_needed, inf2.instances_needed) == (10, 2)
    assert g5.fleet_power_w == pytest.approx(10 * 100.0)  # 10 x 100 W
    assert inf2.fleet_power_w == pytest.approx(2 * 90_000 / 1800)  # 2 x 50 W
    assert g5.fleet_cost_per_hour_usd == pytest.approx(10 * G5)  # 10.06 USD/h
    assert inf2.fleet_cost_per_hour_usd == pytest.approx(2 * INF2)  # 1.5164 USD/h
    # 63 000/h needs exactly one inf2 instance, not two from float noise
    assert compare([ON_INF2], sla_units_per_hour=63_000).rows[0].instances_needed == 1


def test_baseline_by_name_and_by_id() -> None:
    table = compare([ON_G5, ON_INF2], baseline="inf2-run")
    g5, inf2 = table.rows
    assert table.baseline == "inf2-run" and inf2.is_baseline
    assert g5.throughput_x == pytest.approx(10_000 / 63_000)  # x0.16
    assert g5.energy_pct == pytest.approx((36 / (90_000 / 31_500) - 1) * 100)  # +1160 %
    runs = [figures(f"id-{n}", [("g5.xlarge", H, 1.0)], {"inference": 1}, name="bert")
            for n in (1, 2)]
    with pytest.raises(CompareError) as error:
        compare([ON_G5, *runs], baseline="bert")
    assert error.value.argument == "baseline" and "give the job id" in str(error.value)
    assert compare([ON_G5, *runs], baseline="id-2").rows[2].is_baseline


def test_by_instance_type_pools_units_over_instance_hours() -> None:
    second_g5 = figures("g5-b", [("g5.xlarge", 0.5 * H, 200_000.0)], {"inference": 6_000})
    table = compare([ON_INF2, ON_G5, second_g5], by="instance_type", baseline="g5.xlarge")
    inf2, g5 = table.rows
    assert (inf2.group, g5.group, g5.job, g5.runs) == ("inf2.xlarge", "g5.xlarge", None, 2)
    assert g5.job_ids == ("g5-run", "g5-b") and g5.is_baseline
    # (10 000 + 6 000) inferences over (1 + 0.5) instance-hours
    assert g5.units_per_hour == pytest.approx(16_000 / 1.5)
    assert g5.energy_per_unit_j == pytest.approx((360_000 + 200_000) / 16_000)  # 35 J
    assert g5.cost_per_million_usd == pytest.approx(G5 * 1.5 / 16_000 * 1e6)
    assert g5.energy_per_run_j == pytest.approx(560_000 / 2)
    assert g5.power_per_instance_w == pytest.approx(560_000 / (1.5 * H))
    assert inf2.throughput_x == pytest.approx(63_000 / (16_000 / 1.5))
    assert inf2.energy_pct == pytest.approx(((90_000 / 31_500) / 35 - 1) * 100)
    assert table.baseline == "g5.xlarge"


def test_multi_node_job_charged_per_instance_hour() -> None:
    # loader c6i.4xlarge + trainer p4d.24xlarge, both held 2 h; the trainer counts samples
    dist = figures("dist", [("c6i.4xlarge", 2 * H, 720_000.0), ("p4d.24xlarge", 2 * H,
                                                                 28_800_000.0)],
                   {"sample": 1_000_000}, kind="training")
    [row] = compare([dist], sla_units_per_hour=1_000_000).rows
    assert row.group == "c6i.4xlarge+p4d.24xlarge"
    assert row.instance_types == ("c6i.4xlarge", "p4d.24xlarge")
    assert row.instance_hours == pytest.approx(4.0)
    assert row.units_per_hour == pytest.approx(1_000_000 / 4)  # per instance-hour
    assert row.cost_usd == pytest.approx((C6I + P4D) * 2)  # each node's price x 2 h
    assert row.cost_per_million_usd == pytest.approx((C6I + P4D) * 2)  # 1 M samples
    assert row.power_per_instance_w == pytest.approx(29_520_000 / (4 * H))  # 2050 W
    assert row.instances_needed == 4  # 1 000 000 / 250 000
    assert row.fleet_power_w == pytest.approx(4 * 2050.0)
    assert row.fleet_cost_per_hour_usd == pytest.approx(4 * (C6I + P4D) * 2 / 4)

    # by instance type it is its own group; two nodes of one type pool with that type
    single = figures("p4d-1", [("p4d.24xlarge", H, 14_400_000.0)], {"sample": 600_000})
    pair = figures("p4d-2", [("p4d.24xlarge", H, 14_000_000.0),
                             ("p4d.24xlarge", H, 14_000_000.0)], {"sample": 1_000_000})
    table = compare([dist, single, pair], by="instance_type")
    assert [r.group for r in table.rows] == ["c6i.4xlarge+p4d.24xlarge", "p4d.24xlarge"]
    p4d = table.rows[1]
    assert p4d.job_ids == ("p4d-1", "p4d-2")
    assert p4d.units_per_hour == pytest.approx(1_600_000 / 3)  # 3 instance-hours
    assert p4d.cost_per_instance_hour_usd == pytest.approx(P4D)


def test_setup_names_one_type_once_sorted_and_unknown_when_empty() -> None:
    # the name every page and report gives a job's setup (the dashboard's setup_of too)
    assert setup_name(["p4d.24xlarge", "c6i.4xlarge", "p4d.24xlarge"]) == (
        "c6i.4xlarge+p4d.24xlarge")
    assert setup_name(["g5.xlarge", ""]) == "g5.xlarge+unknown"
    assert setup_name([]) == "unknown"


def test_jobs_without_the_unit_get_per_run_rows() -> None:
    train = figures("train", [("p4d.24xlarge", H, 10_800_000.0)], {}, kind="training")
    table = compare([train, ON_G5, ON_INF2], sla_units_per_hour=1_000)
    assert [r.label for r in table.rows] == ["g5-run", "inf2-run", "train"]  # per unit first
    assert table.baseline == "g5-run"
    run = table.rows[2]
    assert (run.basis, run.unit, run.units, run.units_per_hour) == ("run", None, None, None)
    assert run.energy_per_unit_j is None and run.cost_per_million_usd is None
    assert run.energy_per_run_j == 10_800_000.0  # the run's own energy
    assert run.co2e_per_run_g == pytest.approx(10_800_000 * G_PER_J)  # 3 kWh x 400 g
    assert run.cost_per_run_usd == pytest.approx(P4D * 1.0)
    assert (run.throughput_x, run.energy_pct, run.cost_pct) == (None, None, None)
    assert run.instances_needed is None
    assert headline(run, table.rows[0]).startswith("not comparable")


def test_runs_without_any_unit_compare_per_run() -> None:
    first = figures("a", [("p4d.24xlarge", 2 * H, 20_000_000.0)], {}, kind="training")
    second = figures("b", [("p4d.24xlarge", H, 15_000_000.0)], {}, kind="training")
    table = compare([first, second])
    assert table.unit is None and table.baseline == "a"
    b = table.rows[1]
    assert b.basis == "run"
    assert b.energy_pct == pytest.approx((15 / 20 - 1) * 100)  # -25 %
    assert b.cost_pct == pytest.approx((P4D * 1 / (P4D * 2) - 1) * 100)  # -50 %
    assert headline(b, table.rows[0]) == (
        f"\u221225 % energy per run (1 run, spread unknown), \u221225 % CO2e per run, "
        f"${P4D:.2f} vs "
        f"${2 * P4D:.2f} per run")


def test_unknown_price_stays_unknown() -> None:
    local = figures("laptop", [("local", H, 36_000.0)], {"inference": 1_000},
                    embodied_g=None)
    assert local.cost_usd is None
    table = compare([ON_G5, local], sla_units_per_hour=5_000)
    row = table.rows[1]
    assert row.cost_usd is None and row.cost_per_unit_usd is None
    assert row.cost_per_million_usd is None and row.cost_pct is None
    assert row.embodied_per_unit_g is None
    assert row.instances_needed == 5 and row.fleet_cost_per_hour_usd is None
    assert row.fleet_power_w == pytest.approx(5 * 10.0)  # 36 kJ over 1 h = 10 W
    assert row.energy_per_unit_j == pytest.approx(36.0)  # energy is still known
    assert headline(row, table.rows[0]).endswith(
        "cost per million inferences unknown for laptop")
    pooled = compare([ON_G5, figures("g5-local-price", [("g5.xlarge", H, 1.0)],
                                     {"inference": 1}), local], by="instance_type")
    assert pooled.rows[0].cost_usd is not None  # both g5 jobs priced
    assert pooled.rows[1].cost_usd is None


def test_rebase_gives_what_compare_gives_with_that_baseline_and_sla() -> None:
    # The dashboard computes the rows once and lets the viewer move the baseline and SLA.
    train = figures("train", [("p4d.24xlarge", H, 10_800_000.0)], {}, kind="training")
    local = figures("laptop", [("local", H, 36_000.0)], {"inference": 1_000},
                    embodied_g=None)
    jobs = [ON_G5, ON_INF2, local, train]
    for by, baselines in (("job", [None, "inf2-run", "laptop", "train"]),
                          ("instance_type", [None, "inf2.xlarge", "local"])):
        start = compare(jobs, by=by, baseline=baselines[-1], sla_units_per_hour=7)
        for baseline in baselines:
            for sla in (None, 1.0, 123_456.0):
                assert rebase(start, baseline, sla) == compare(
                    jobs, by=by, baseline=baseline, sla_units_per_hour=sla)
    with pytest.raises(CompareError) as error:
        rebase(compare(jobs), "nope")
    assert error.value.argument == "baseline"
    with pytest.raises(CompareError) as error:
        rebase(compare([]), "g5-run")
    assert error.value.argument == "baseline"
    assert rebase(compare([]), sla_units_per_hour=5.0) == compare([], sla_units_per_hour=5.0)


def test_default_unit_is_the_one_most_jobs_counted() -> None:
    tokens = figures("llm", [("g5.xlarge", H, 1.0)], {"token": 5.0, "inference": 0.0})
    assert compare([tokens, ON_G5, ON_INF2]).unit == "inference"  # 2 jobs vs 1
    assert compare([tokens, ON_G5]).unit == "inference"  # 1 vs 1: alphabetical
    assert compare([tokens, ON_G5], unit="token").rows[0].job == "llm"


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"unit": "furlong"}, "unit"),
    ({"baseline": "nope"}, "baseline"),
    ({"by": "instance_type", "baseline": "p5.48xlarge"}, "baseline"),
    ({"sla_units_per_hour": 0}, "sla_units_per_hour"),
    ({"sla_units_per_hour": -5.0}, "sla_units_per_hour"),
    ({"sla_units_per_hour": math.nan}, "sla_units_per_hour"),
    ({"by": "region"}, "by"),
])
def test_bad_input_names_the_argument(kwargs: dict, argument: str) -> None:
    with pytest.raises(CompareError) as error:
        compare([ON_G5, ON_INF2], **kwargs)
    assert error.value.argument == argument


def test_no_jobs_is_an_empty_table() -> None:
    table = compare([])
    assert (table.rows, table.unit, table.baseline, table.baseline_row) == ((), None, None, None)


def test_figures_reject_impossible_numbers() -> None:
    with pytest.raises(ValueError, match="energy_j"):
        JobFigures("x", "x", "other", (), {}, 1.0, -1.0, 0.0, None, None)
    with pytest.raises(ValueError, match="units"):
        JobFigures("x", "x", "other", (), {"inference": math.inf}, 1.0, 1.0, 0.0, None, None)


def test_word_formats() -> None:
    assert (format_ratio(6.3), format_ratio(10_000 / 63_000)) == ("\u00d76.3", "\u00d70.16")
    assert format_pct(-92.06) == "\u221292 %"
    assert (format_pct(4.54), format_pct(0.01)) == ("+4.5 %", "\u00b10 %")


def test_factors_past_99_percent() -> None:
    # A 215-fold drop read "-100 %", hiding its size; past +/-99 % a change is a factor.
    assert format_pct((1 / 215 - 1) * 100) == "/215"
    assert format_pct((215 - 1) * 100) == "\u00d7215"
    assert format_pct(150.0) == "\u00d72.5"
    assert format_pct(-99.0) == "\u221299 %" and format_pct(99.0) == "+99 %"
    assert format_pct(-100.0) == "\u2212100 %"  # down to nothing: no factor to give
    assert format_pct((1 / 1234.4 - 1) * 100) == "/1,234"


# -- energy above idle, and the idle policy it was attributed under ----------------------

def with_dynamic(job: JobFigures, dynamic_j: float, policy: str | None) -> JobFigures:
    return replace(job, dynamic_j=dynamic_j, idle_policy=policy)


def test_energy_per_unit_twice_total_and_dynamic() -> None:
    # g5: 360 kJ of which 36 kJ above idle; inf2: 90 kJ of which 63 kJ above idle.
    g5 = with_dynamic(ON_G5, 36_000.0, "share")
    inf2 = with_dynamic(ON_INF2, 63_000.0, "share")
    table = compare([g5, inf2])
    base, row = table.rows
    assert base.dynamic_j == 36_000.0 and base.dynamic_per_unit_j == pytest.approx(3.6)
    assert row.dynamic_per_unit_j == pytest.approx(63_000 / 31_500)  # 2 J
    assert row.dynamic_per_run_j == 63_000.0
    assert row.dynamic_pct == pytest.approx((2 / 3.6 - 1) * 100)  # -44 %
    assert row.energy_pct == pytest.approx((90_000 / 31_500 / 36 - 1) * 100)  # -92 %
    assert (base.idle_policy, row.idle_policy, table.idle_policy) == ("share",) * 3
    assert headline(row, base) == (
        "\u00d76.3 throughput, \u221292 % energy per inference (1 run, spread unknown), "
        "\u221244 % dynamic energy per inference, \u221292 % CO2e per inference, $12.03 vs "
        "$100.60 per million inferences")
    # an unknown dynamic part makes the row's unknown, never 0
    pooled = compare([g5, ON_G5], by="instance_type").rows[0]
    assert pooled.dynamic_j is None and pooled.dynamic_per_unit_j is None
    assert pooled.idle_policy == "mixed"  # one recorded, one not


def test_the_idle_policy_of_rows_and_tables() -> None:
    share = with_dynamic(ON_G5, 36_000.0, "share")
    exclude = with_dynamic(replace(ON_INF2, energy_j=63_000.0), 63_000.0, "exclude")
    table = compare([share, exclude])
    assert [r.idle_policy for r in table.rows] == ["share", "exclude"]
    assert table.idle_policy == "mixed"
    out = as_json(table, [])
    assert out["idle_policy"] == "mixed"
    assert [r["idle_policy"] for r in out["rows"]] == ["share", "exclude"]
    assert [r["dynamic_per_unit_j"] for r in out["rows"]] == [pytest.approx(3.6),
                                                              pytest.approx(2.0)]
    text = render_text(table, [], wide=True)
    assert policy_words("mixed", jobs=True) in text.splitlines()[1]
    header = next(line for line in text.splitlines() if line.startswith("job "))
    assert "dynamic/inference" in header and "idle policy" in header
    one = compare([share])
    assert one.idle_policy == "share" and policy_words("share") in render_text(one, [],
                                                                               wide=True)
    assert "idle policy" not in next(line for line in render_text(one, []).splitlines()
                                     if line.startswith("job "))
    assert compare([ON_G5]).idle_policy is None
    assert policy_words(None) in render_text(compare([ON_G5]), [], wide=True)


# -- by model ----------------------------------------------------------------------------

def split_of(job: JobFigures, busy: dict[str, float], units: dict[str, dict[str, float]]
             ) -> ModelSplit:
    """``job``'s energy split among models busy ``busy`` (fractions of it), the rest idle."""
    shares = tuple(ModelShare(m, job.energy_j * f, f * 100.0, units[m])
                   for m, f in busy.items())
    return ModelSplit(job.job_id, job.energy_j,
                      job.energy_j - sum(s.energy_j for s in shares), shares)


def test_one_model_server_reads_the_same_by_model_as_by_job() -> None:
    # The server: one model busy 11 % of the time. By job 263 mJ per inference at
    # 617 k/h; by model it read 30 mJ at 5.4 M/h (and an "idle" row).
    server = with_dynamic(ON_G5, 90_000.0, "share")
    split = split_of(server, {"m1": 0.114}, {"m1": {"inference": 10_000}})
    parts = by_model([server], {server.job_id: split})
    assert parts.unassigned == () and parts.notes() == []
    [by_job] = compare([server]).rows
    [row] = compare(list(parts.parts), by="model").rows
    assert row.group == "model=m1" and row.basis == "unit"
    for name in ("energy_per_unit_j", "units_per_hour", "dynamic_per_unit_j",
                 "co2e_per_unit_g", "cost_per_million_usd", "instance_hours",
                 "power_per_instance_w"):
        assert getattr(row, name) == pytest.approx(getattr(by_job, name)), name
    assert row.idle_policy == "share"


def test_two_models_carry_the_whole_job_and_count_their_own_units() -> None:
    # a busy 45 % of the time, b 15 %, nobody 40 %: a carries 3/4 of everything.
    server = with_dynamic(ON_G5, 120_000.0, "exclude")
    split = split_of(server, {"a": 0.45, "b": 0.15},
                     {"a": {"inference": 6_000}, "b": {"inference": 4_000}})
    assert split.job_fractions() == pytest.approx({"a": 0.75, "b": 0.25})
    parts = by_model([server], {server.job_id: split})
    a, b = parts.parts
    assert (a.model, b.model) == ("a", "b")
    assert a.energy_j + b.energy_j == pytest.approx(server.energy_j)
    assert a.energy_j == pytest.approx(0.75 * 360_000)
    assert a.dynamic_j + b.dynamic_j == pytest.approx(120_000.0)
    assert a.cost_usd + b.cost_usd == pytest.approx(server.cost_usd)
    assert a.operational_co2e_g + b.operational_co2e_g == pytest.approx(
        server.operational_co2e_g)
    # each model's throughput: its units over the hours the server was held (1 h)
    assert a.instance_hours == b.instance_hours == server.instance_hours
    table = compare(list(parts.parts), by="model", baseline="b")
    rows = {r.group: r for r in table.rows}
    assert set(rows) == {"model=a", "model=b"}  # no idle row, no "model unset"
    assert rows["model=a"].units_per_hour == pytest.approx(6_000)
    assert rows["model=a"].energy_per_unit_j == pytest.approx(0.75 * 360_000 / 6_000)
    assert rows["model=b"].energy_per_unit_j == pytest.approx(0.25 * 360_000 / 4_000)
    assert rows["model=a"].dynamic_per_unit_j == pytest.approx(0.75 * 120_000 / 6_000)
    assert sum(r.energy_j for r in table.rows) == pytest.approx(server.energy_j)
    # never busy: the models share the job evenly rather than vanish
    idle_only = split_of(server, {"a": 0.0, "b": 0.0}, {"a": {}, "b": {}})
    assert idle_only.job_fractions() == {"a": 0.5, "b": 0.5}


def test_jobs_that_served_no_model_are_left_out_by_model_and_said_so() -> None:
    server = with_dynamic(ON_G5, 36_000.0, "share")
    split = split_of(server, {"m1": 0.5}, {"m1": {"inference": 10_000}})
    parts = by_model([server, ON_INF2], {server.job_id: split})
    assert [p.model for p in parts.parts] == ["m1"]
    assert parts.unassigned == (ON_INF2,)
    [note] = parts.notes()
    assert "1 job(s) served no named model" in note and "inf2-run" in note
    assert [r.group for r in compare(list(parts.parts), by="model").rows] == ["model=m1"]
