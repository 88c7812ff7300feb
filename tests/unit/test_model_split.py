"""A multi-model job's energy split among its models by busy time, read back from the
store (agent/store/model_split.py): the formula, conservation on every tick and minute,
the same figures once raw rows are rolled up, and per-model keys kept out of every
listing of a job's units."""

from __future__ import annotations

import pytest

from joulestat.store.jobs import job_detail, job_units_by_kind, list_jobs
from joulestat.store.model_split import model_splits, split_energy, split_rows
from joulestat.store.series import job_unit_rows, job_unit_series
from tests.helpers.model_split_store import (
    assert_rows_conserved,
    check_split_by_busy_time_and_after_rollup,
    fill,
)
from tests.helpers.store_jobs import T0, feed, make_job, writer_for


def test_the_formula_shares_busy_time_and_leaves_the_rest_idle():
    models, idle = split_energy(100.0, 10.0, {"a": 6.0, "b": 2.0})
    assert models == pytest.approx({"a": 60.0, "b": 20.0}) and idle == pytest.approx(20.0)
    # Concurrent requests: more busy seconds than wall time share the whole by ratio.
    models, idle = split_energy(100.0, 10.0, {"a": 15.0, "b": 5.0})
    assert models == pytest.approx({"a": 75.0, "b": 25.0}) and idle == pytest.approx(0.0)
    assert split_energy(50.0, 10.0, {}) == ({}, 50.0)
    assert split_energy(0.0, 0.0, {"a": 1.0}) == ({"a": 0.0}, 0.0)


def test_two_models_get_energy_by_busy_time_and_keep_it_once_rolled_up(engine):
    check_split_by_busy_time_and_after_rollup(engine)


def test_per_model_keys_are_not_listed_as_units(engine):
    fill(engine, ticks=5)
    [job] = list_jobs(engine)
    assert job.units == {"inference": 40.0}
    assert job_detail(engine, "svc").units == {"inference": 40.0}
    assert job_units_by_kind(engine) == {"training": ["inference"]}
    assert {unit for _n, _t, unit, _c in job_unit_rows(engine, "svc")} == {"inference"}
    assert {unit for _t, _n, unit, _c in job_unit_series(engine, "svc", 60)} == {"inference"}


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
