"""Is a difference real? (issue 46): what two rows share cancels in their ratio, what
they do not widens it, and the runs' spread decides the rest."""

from __future__ import annotations

import math
import statistics

import pytest

from joulestat.carbon.pricing import NodeFigures
from joulestat.reports.compare import words
from joulestat.reports.compare.difference import t95
from joulestat.reports.compare.table import JobFigures, compare, energy_difference
from joulestat.reports.compare.words import NOT_DISTINGUISHABLE, as_json, headline

ESTIMATED = (0.45, 2.93)  # a VM's estimator: -55 % / +193 % around the figure
UNITS = 1000.0


def _run(job_id: str, per_unit_j: float, itype: str = "c6i.2xlarge",
         source: str = "model:ccf-vcpu", bounds: tuple[float, float] | None = ESTIMATED,
         threads: str = "1") -> JobFigures:
    energy_j = per_unit_j * UNITS
    return JobFigures(
        job_id=job_id, name="infer", kind="inference",
        nodes=(NodeFigures("node-a", itype, 60.0, energy_j, 0.01),),
        units={"inference": UNITS}, duration_s=60.0, energy_j=energy_j,
        operational_co2e_g=energy_j / 1e4, embodied_co2e_g=None, cost_usd=0.01,
        labels={"threads": threads}, sources=(source,),
        energy_bounds_j=None if bounds is None
        else (energy_j * bounds[0], energy_j * bounds[1]))


def _setups(first: list[float], second: list[float],
            bounds: tuple[float, float] = ESTIMATED, **second_node: str) -> tuple:
    """Runs at 1 and 2 threads (rows threads=1, threads=2); the second's node and source
    may differ. Both setups' bounds are ``bounds`` around their figures."""
    jobs = [_run(f"a{i}", v, bounds=bounds) for i, v in enumerate(first)]
    jobs += [_run(f"b{i}", v, threads="2", bounds=bounds, **second_node)
             for i, v in enumerate(second)]
    table = compare(jobs, by="label:threads")
    return table, table.rows[0], table.rows[1]


def test_one_estimator_on_one_node_a_2x_difference_is_real_with_its_interval() -> None:
    # 1 vs 2 threads on one VM: 626 uJ vs 1.29 mJ per inference, three runs each
    table, one, two = _setups([626e-6, 640e-6, 612e-6], [1.29e-3, 1.25e-3, 1.33e-3])
    assert two.energy_error_shared is True
    assert two.energy_distinguishable is True
    low, high = two.energy_change_interval_pct
    assert low < two.energy_pct < high and low > 0  # the whole interval above "the same"
    # the interval is the runs' 95 % (Welch-Satterthwaite degrees of freedom), not the
    # estimator's bounds: they are the same estimator's on the same node
    runs = ([626e-6, 640e-6, 612e-6], [1.29e-3, 1.25e-3, 1.33e-3])
    errors = [(statistics.stdev(v) / statistics.fmean(v)) ** 2 / 3 for v in runs]
    dof = sum(errors) ** 2 / sum(e * e / 2 for e in errors)
    ratio = 1 + two.energy_pct / 100
    widen = math.exp(t95(dof) * math.sqrt(sum(errors)))
    assert (low, high) == (pytest.approx((ratio / widen - 1) * 100),
                           pytest.approx((ratio * widen - 1) * 100))
    text = headline(two, one)
    assert NOT_DISTINGUISHABLE not in text
    # said as the change is, a factor: "×2.1 energy per inference (×1.9 to ×2.2)"
    factors = [words.format_factor(1 + v / 100) for v in (low, high)]
    assert f"({factors[0]} to {factors[1]})" in text
    answer = as_json(table, [])
    found = {h["row"]: h for h in answer["headlines"]}
    assert found["threads=2"]["energy_distinguishable"] is True
    assert answer["rows"][1]["energy_change_interval_pct"] == (low, high)


def test_five_percent_apart_with_ten_percent_spread_is_not_distinguishable() -> None:
    _table, one, two = _setups([1.0e-3, 1.1e-3, 0.9e-3], [1.05e-3, 1.155e-3, 0.945e-3])
    assert two.energy_pct == pytest.approx(5.0)
    assert two.energy_distinguishable is False
    low, high = two.energy_change_interval_pct
    assert low < 0 < high
    assert NOT_DISTINGUISHABLE in headline(two, one)


def test_different_models_on_different_types_do_not_cancel() -> None:
    # 2x apart, each estimated by its own model with bounds wider than 2x
    _table, one, two = _setups([1.0e-3, 1.01e-3, 0.99e-3], [2.0e-3, 2.02e-3, 1.98e-3],
                               itype="m7g.2xlarge", source="model:ccf-arm")
    assert two.energy_error_shared is False
    assert two.energy_distinguishable is False
    low, high = two.energy_change_interval_pct
    assert low < 0 < high
    # the same two setups measured by sensors of a few percent (RAPL's 5 %): real
    _t, one, two = _setups([1.0e-3, 1.01e-3, 0.99e-3], [2.0e-3, 2.02e-3, 1.98e-3],
                           itype="m7g.2xlarge", source="rapl", bounds=(0.95, 1.05))
    assert two.energy_error_shared is False
    assert two.energy_distinguishable is True


def test_one_run_each_says_so_and_cannot_be_judged_on_a_shared_estimator() -> None:
    _table, one, two = _setups([626e-6], [1.29e-3])
    difference = energy_difference(two, one)
    assert difference is not None and difference.one_run and difference.shared
    assert two.energy_distinguishable is None and two.energy_change_interval_pct is None
    assert "1 run" in headline(two, one)


def test_t_is_never_narrower_than_its_quantile() -> None:
    assert t95(4) == pytest.approx(2.776) and t95(4.9) == t95(4)
    assert t95(0.5) == t95(1) and t95(1e6) == pytest.approx(1.96)
    assert t95(35) == t95(30)
