"""A two-model server's job in the store, for any database: the store's split of its
energy among the models (agent/store/model_split.py), checked before and after its raw
rows are rolled up. Runs on SQLite in tests/unit/test_model_split.py and on a real
PostgreSQL in tests/integration/test_model_split_postgres.py."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from joulestat.store.jobs import list_jobs
from joulestat.store.model_split import SplitRow, model_splits, split_rows
from joulestat.store.writer import StoreWriter
from tests.helpers.store_jobs import RETENTION_S, T0, TRAINER, feed, make_job, writer_for

# Per 1 s tick: model a busy 0.6 s, model b 0.2 s, nothing 0.2 s; as the registry stores
# a client's count("inference", n, model=..., busy_s=...): plain and per-model keys.
UNITS = {"inference": 8.0, "inference@a": 6.0, "inference@b": 2.0,
         "busy_s@a": 0.6, "busy_s@b": 0.2}


def fill(engine: Engine, units: dict[str, float] | None = None, ticks: int = 600
         ) -> StoreWriter:
    """Job ``svc`` alone on the node for ``ticks`` 1 s ticks, counting ``units`` each."""
    writer = writer_for(engine)
    writer.save_job(make_job("svc", T0))
    feed(writer, T0, ticks, ("svc",), gpu=False, units=units or UNITS)
    assert writer.flush()
    return writer


def assert_rows_conserved(engine: Engine, job_id: str, total_j: float) -> list[SplitRow]:
    """Models + idle = energy on every row, and the rows hold the job's energy once."""
    rows = split_rows(engine, job_id)
    assert rows
    for row in rows:
        assert sum(row.models.values()) + row.idle_j == pytest.approx(
            row.energy_j, rel=1e-12, abs=1e-9), row
        assert all(joules >= 0 for joules in row.models.values()) and row.idle_j >= -1e-9
    assert sum(r.energy_j for r in rows) == pytest.approx(total_j, rel=1e-12)
    return rows


def check_split_by_busy_time_and_after_rollup(engine: Engine) -> None:
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
