"""A multi-model job's energy split among its models by busy time, read back from the
store (agent/store/model_split.py): the formula, conservation on every tick and minute,
the same figures once raw rows are rolled up, and per-model keys kept out of every
listing of a job's units."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from joulestat.store.job_pools import units_by_kind
from joulestat.store.jobs import job_detail, list_jobs
from joulestat.store.model_split import model_splits, split_energy, split_rows
from joulestat.store.series import job_unit_rows
from tests.helpers.model_split_store import (
    assert_rows_conserved,
    fill,
)
from tests.helpers.store_jobs import RETENTION_S, T0, TRAINER, feed, make_job, writer_for


def test_the_formula_shares_busy_time_and_leaves_the_rest_idle():
    models, idle = split_energy(100.0, 10.0, {"a": 6.0, "b": 2.0})
    assert models == pytest.approx({"a": 60.0, "b": 20.0}) and idle == pytest.approx(20.0)
    # Concurrent requests: more busy seconds than wall time share the whole by ratio.
    models, idle = split_energy(100.0, 10.0, {"a": 15.0, "b": 5.0})
    assert models == pytest.approx({"a": 75.0, "b": 25.0}) and idle == pytest.approx(0.0)
    assert split_energy(50.0, 10.0, {}) == ({}, 50.0)
    assert split_energy(0.0, 0.0, {"a": 1.0}) == ({"a": 0.0}, 0.0)


def test_per_model_keys_are_not_listed_as_units(engine):
    fill(engine, ticks=5)
    [job] = list_jobs(engine)
    assert job.units == {"inference": 40.0}
    assert job_detail(engine, "svc").units == {"inference": 40.0}
    assert units_by_kind(engine) == {"training": ["inference"]}
    assert {unit for _n, _t, unit, _c in job_unit_rows(engine, "svc")} == {"inference"}


def test_a_job_without_models_has_no_split(engine):
    fill(engine, units={"inference": 1.0}, ticks=5)
    assert model_splits(engine, ["svc"]) == {}
    assert all(row.models == {} and row.idle_j == row.energy_j
               for row in split_rows(engine, "svc"))


def test_busy_time_sent_in_lumps_evens_out_over_the_minute(engine):
    # The client sends about once a second, out of step with the ticks: a tick may take
    # 1.6 s of busy time and the next none. Per tick that would give model a half the
    # energy; per minute it gets its 80 %.
    writer = writer_for(engine)
    writer.save_job(make_job("svc", T0))
    for i in range(120):
        feed(writer, T0 + i, 1, ("svc",), gpu=False,
             units={"busy_s@a": 1.6 if i % 2 == 0 else 0.0})
    assert writer.flush()
    [job] = list_jobs(engine)
    split = model_splits(engine, ["svc"])["svc"]
    assert split.model("a").energy_j == pytest.approx(0.8 * job.total_j, rel=1e-9)
    assert_rows_conserved(engine, "svc", job.total_j)


def test_two_models_get_energy_by_busy_time_and_keep_it_once_rolled_up(engine: Engine) -> None:
    writer = fill(engine)
    [job] = list_jobs(engine)
    before = model_splits(engine, ["svc", "nobody"])["svc"]
    assert before.energy_j == pytest.approx(job.total_j, rel=1e-12)
    a, b = before.model("a"), before.model("b")
    assert a is not None and b is not None
    assert a.energy_j == pytest.approx(0.6 * job.total_j, rel=1e-9)
    assert b.energy_j == pytest.approx(0.2 * job.total_j, rel=1e-9)
    assert before.idle_j == pytest.approx(0.2 * job.total_j, rel=1e-9)
    assert a.busy_s == pytest.approx(360.0) and a.units == {"inference": 3600.0}
    # One flush of ten minutes: a window a minute (migration 0009).
    assert len(assert_rows_conserved(engine, "svc", job.total_j)) == 10

    now = T0 + 600 + RETENTION_S - 270  # prunes minutes 0..4, keeps 5..9 raw
    assert writer.maintain(now).raw_pruned_until_ms == round((T0 + 300) * 1000)
    after = model_splits(engine, ["svc"])["svc"]
    assert after.energy_j == pytest.approx(before.energy_j, rel=1e-12)
    assert after.idle_j == pytest.approx(before.idle_j, rel=1e-9)
    for model in before.models:
        found = after.model(model.model)
        assert found is not None and found.units == model.units
        assert found.energy_j == pytest.approx(model.energy_j, rel=1e-9)
    rows = assert_rows_conserved(engine, "svc", before.energy_j)
    # The job totals' boundary passed all ten minutes: their windows are minute rollups.
    assert sum(r.rolled for r in rows) == 10 and len(rows) == 10
    assert rows[0].node == TRAINER.node and rows[0].t_end_s == T0 + 60
    [job] = list_jobs(engine)
    assert job.units == {"inference": 4800.0}  # the per-model keys are no unit of the job
