"""A two-model server's job in the store, for any database: the store's split of its
energy among the models (agent/store/model_split.py), checked before and after its raw
rows are rolled up by tests/store/test_model_split.py."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from joulestat.store.model_split import SplitRow, split_rows
from joulestat.store.writer import StoreWriter
from tests.helpers.store_jobs import T0, feed, make_job, writer_for

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
