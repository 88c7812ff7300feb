"""The open parts' copies a fleet's comparison reads (agent/store/open_parts.py) are their
totals, copied.

A node's maintain pass copies its open parts (single-node, on no summed day: a fleet's
running jobs) with their job's attributes and their totals into tables of their own; a
comparison by setup reads a copied part from them, and its raw rows after the node's
totals boundary as for any part. Checked on SQLite and PostgreSQL: the pooled table is
the per-job one with the copies in use, the copies are what is read, and any change to a
copied part (its totals moved, its job written again, ended, relabelled, deleted, a part
on another node) takes its copy out of use at once (the triggers of revision 0005) until
the next pass copies it again. What the pass adds up of a node's copies (revision 0006:
per part, per node and source) is read while it holds, and the copies themselves once a
copy was taken out of use or a part counted the unit only after its copy.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import func, inspect, select, update
from sqlalchemy.engine import Engine

from joulestat.carbon.pricing import Pricer
from joulestat.reports.compare.setups import compare_setups
from joulestat.store import migrate
from joulestat.store.job_delete import delete_jobs
from joulestat.store.jobs import JobFilter, job_totals
from joulestat.store.schema import (
    DAY_S,
    JOB_OPEN_ENERGY,
    JOB_OPEN_PARTS,
    JOB_OPEN_SOURCES,
    JOB_OPEN_SUMS,
)
from joulestat.store.writer import StoreWriter
from tests.helpers.compare_store import (
    DEVICES,
    SETTINGS,
    T0,
    assert_pooled_is_per_job,
    job,
    maintain_every_node,
    node,
    run_job,
    runs_store,
    settle,
)
from tests.helpers.job_delete_store import rows_of
from tests.helpers.store_jobs import downgrade
from tests.helpers.stores import Store

RUNS = 24  # ended runs an hour apart from T0, on g5-0 and g5-1 in turn
DAY = int((T0 + DAY_S) // DAY_S * DAY_S)  # the day after T0's
NOW = DAY + 6 * 3600 + 30
RUNNING = {f"r-{i}": f"g5-{i % 2}" for i in range(4)}


def _running(job_id: str):
    """A running job of the comparison's name, started an hour before NOW."""
    i = int(job_id.removeprefix("r-"))
    return replace(job(job_id, "bert-g5", "inference", NOW - 3_600 + i * 60, 0),
                   ended_s=None)


def _store(url: str) -> Engine:
    """The ended runs, four running jobs with ticks behind and after the totals boundary
    of the pass at NOW, and that pass (days summed, open parts copied)."""
    engine = runs_store(url, RUNS)
    for job_id, name in RUNNING.items():
        run_job(engine, node(name, "g5.xlarge"), _running(job_id), ticks=6, gpu_j=4_000.0,
                units={"inference": 40}, from_s=NOW - 3_000 + int(job_id[-1]) * 60)
    maintain_every_node(engine, NOW)
    return engine


def _copied(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(select(JOB_OPEN_PARTS.c.job_id)).scalars())


def _energy_j(engine: Engine, now_s: float = NOW) -> float:
    found = compare_setups(engine, JobFilter(kind="inference"), Pricer(SETTINGS), now_s,
                           with_ids=False)
    assert found is not None
    [row] = found.table.rows
    return row.energy_j


def _assert_one_answer(engine: Engine, now_s: float = NOW) -> None:
    """Pooled is per-job, per run and per inference, over all time and a window."""
    for unit in (None, "inference"):
        for since_s in (None, DAY):
            assert_pooled_is_per_job(engine, "inference", unit=unit, now_s=now_s,
                                     since_s=since_s, with_ids=False)


def test_open_parts_are_copied_and_read_as_their_totals(store: Store) -> None:
    engine = _store(store.url)
    # The pass copied the running jobs, and the ended ones it did not sum (those after
    # the day's settle line), and nothing else.
    ended_after_line = {f"j-{i:03d}" for i in range(RUNS)
                        if T0 + i * 3600 + 900 > (NOW // 60 * 60 - 120) - 300}
    assert _copied(engine) == set(RUNNING) | ended_after_line
    with engine.connect() as connection:
        copied_rows = connection.execute(select(func.count()).select_from(JOB_OPEN_ENERGY)
                                         ).scalar_one()
    assert copied_rows > 0  # their totals, behind the boundary
    _assert_one_answer(engine)
    # The comparison reads the copies, added up by the pass (every node still has the
    # parts it copied): doubled, the part sums add the copied totals once more.
    running_j = sum(j.total_j for j in job_totals(engine, JobFilter(job_ids=list(RUNNING))))
    before_j = _energy_j(engine)
    e = JOB_OPEN_ENERGY.c
    with engine.connect() as connection:
        copied_j = connection.execute(select(func.sum(e.dynamic_j + e.idle_j))).scalar_one()
    assert 0 < copied_j < running_j  # raw rows after the boundary are the rest
    assert _sums_j(engine) == pytest.approx(copied_j, rel=1e-12)
    assert _total_j(_doubled(engine, JOB_OPEN_SUMS)) == pytest.approx(before_j + copied_j,
                                                                     rel=1e-12)
    assert _energy_j(engine) == pytest.approx(before_j, rel=1e-12)
    # A flush after the boundary leaves the copies in use: the raw rows are read anyway.
    run_job(engine, node("g5-0", "g5.xlarge"), _running("r-0"), ticks=2, gpu_j=1_000.0,
            units={"inference": 10}, from_s=NOW + 600)
    assert _copied(engine) >= set(RUNNING) - {"r-0"}
    _assert_one_answer(engine, NOW + 800)


def test_a_change_to_a_copied_part_takes_its_copy_out_of_use(store: Store) -> None:
    engine = _store(store.url)
    g5_0 = node("g5-0", "g5.xlarge")
    changes = (
        # its totals move, by ticks ending at NOW + 600 and 720 (a pass's first step,
        # without the copy that ends the pass)
        (("r-0", "r-2"), lambda: settle(engine, "g5-0", NOW + 800)),
        # written again with a new label (the writer's upsert of the job row)
        (("r-1",), lambda: run_job(engine, node("g5-1", "g5.xlarge"),
                                   replace(_running("r-1"), labels={"try": "2"}), ticks=0,
                                   gpu_j=0.0)),
        # ended
        (("r-3",), lambda: run_job(engine, node("g5-1", "g5.xlarge"),
                                   replace(_running("r-3"), ended_s=NOW + 60), ticks=0,
                                   gpu_j=0.0)),
        # a part on another node: a job on two nodes, read job by job
        (("r-2",), lambda: run_job(engine, node("g5-9", "g5.xlarge"), _running("r-2"),
                                   ticks=1, gpu_j=500.0, from_s=NOW + 100)),
        # deleted
        (("r-0",), lambda: delete_jobs(engine, ["r-0"], force=True)),
    )
    now_s = NOW + 900
    for gone, change in changes:
        maintain_every_node(engine, now_s - 300)  # copied again
        assert set(gone) <= _copied(engine), gone
        change()
        assert not set(gone) & _copied(engine), gone
        _assert_one_answer(engine, now_s)
    maintain_every_node(engine, now_s)
    # r-0 deleted, r-2 on two nodes, r-3 ended before the day's settle line (summed).
    assert _copied(engine) & set(RUNNING) == {"r-1"}
    assert not any(rows_of(engine, "r-0").values())  # its copied totals went with it
    _assert_one_answer(engine, now_s)
    run_job(engine, g5_0, _running("r-4"), ticks=1, gpu_j=100.0, from_s=now_s - 60)
    assert "r-4" not in _copied(engine)  # a new part, read from the totals until a pass
    _assert_one_answer(engine, now_s)


def _rows(engine: Engine, now_s: float = NOW) -> tuple:
    """The comparison's rows: per inference, and per run for the jobs that counted none."""
    found = compare_setups(engine, JobFilter(kind="inference"), Pricer(SETTINGS), now_s,
                           with_ids=False)
    assert found is not None
    return found.table.rows


def _total_j(rows: tuple) -> float:
    return sum(row.energy_j for row in rows)


def _doubled(engine: Engine, table, now_s: float = NOW) -> tuple:
    """The comparison's rows with ``table``'s energy doubled (then put back)."""
    columns = [c for c in ("energy_j", "accelerator_j", "dynamic_j", "idle_j") if c in table.c]
    with engine.begin() as connection:
        connection.execute(update(table).values({c: table.c[c] * 2 for c in columns}))
    rows = _rows(engine, now_s)
    with engine.begin() as connection:
        connection.execute(update(table).values({c: table.c[c] / 2 for c in columns}))
    return rows


def _sums_j(engine: Engine, node_name: str | None = None) -> float:
    t = JOB_OPEN_SUMS.c
    query = select(func.coalesce(func.sum(t.energy_j), 0.0))
    if node_name is not None:
        query = query.where(t.node == node_name)
    with engine.connect() as connection:
        return connection.execute(query).scalar_one()


PASS = NOW + 1_500  # a pass after r-8's first tick


def _count_later(engine: Engine, name: str, job_id: str, t_end_s: float) -> None:
    """``job_id`` counts 5 inferences in a tick ending at ``t_end_s``, flushed by an
    agent that does not write the job again (as between a job's start and its end)."""
    writer = StoreWriter(engine, node(name, "g5.xlarge"), DEVICES, raw_retention_s=7 * 86400)
    writer.add_units(job_id, t_end_s, {"inference": 5})
    assert writer.flush()


def test_a_nodes_copies_are_read_added_up_while_they_hold(store: Store) -> None:
    engine = _store(store.url)
    # A job that counts nothing until after its node's pass: its copy says it counted
    # no unit, its node's sources hold its copied energy under the per-run pool.
    g5_0 = node("g5-0", "g5.xlarge")
    late = replace(_running("r-0"), id="r-8", started_s=NOW)
    run_job(engine, g5_0, late, ticks=1, gpu_j=700.0, from_s=NOW)
    maintain_every_node(engine, PASS)
    assert _copied(engine) >= set(RUNNING) | {"r-8"}
    _assert_one_answer(engine, PASS)
    before = _rows(engine, PASS)
    # Every node still has the parts its pass copied: the comparison reads what the
    # pass added up (a part's sums, its node's sources), not the copied totals rows.
    assert _doubled(engine, JOB_OPEN_ENERGY, PASS) == before
    assert _total_j(_doubled(engine, JOB_OPEN_SUMS, PASS)) == pytest.approx(
        _total_j(before) + _sums_j(engine), rel=1e-12)
    assert all(row.energy_bounds_per_run_j is not None for row in before)  # per source
    assert ([row.energy_bounds_per_run_j for row in _doubled(engine, JOB_OPEN_SOURCES, PASS)]
            != [row.energy_bounds_per_run_j for row in before])
    # r-8 now counts: its copied energy moves from its node's per-run sources to its
    # pool's, read from its copied totals (which then count), and its node's sums hold.
    _count_later(engine, "g5-0", "r-8", PASS + 60)
    assert "r-8" in _copied(engine)
    _assert_one_answer(engine, PASS + 120)
    before = _rows(engine, PASS + 120)
    assert _total_j(_doubled(engine, JOB_OPEN_SUMS, PASS + 120)) == pytest.approx(
        _total_j(before) + _sums_j(engine), rel=1e-12)
    assert _doubled(engine, JOB_OPEN_ENERGY, PASS + 120) != before
    # A copy taken out of use (its job relabelled) puts its node's sums out of use: the
    # other copied parts of g5-1 are read from their copied totals, g5-0's from sums.
    run_job(engine, node("g5-1", "g5.xlarge"), replace(_running("r-1"), labels={"try": "2"}),
            ticks=0, gpu_j=0.0)
    _assert_one_answer(engine, PASS + 120)
    before = _rows(engine, PASS + 120)
    assert _total_j(_doubled(engine, JOB_OPEN_SUMS, PASS + 120)) == pytest.approx(
        _total_j(before) + _sums_j(engine, "g5-0"), rel=1e-12)


def test_revisions_0006_and_0005_down_drop_the_copies_and_up_again_copy(store: Store) -> None:
    engine = _store(store.url)
    assert _copied(engine)
    downgrade(engine, "0005")
    tables = inspect(engine).get_table_names()
    assert "job_open_sums" not in tables and "job_open_sources" not in tables
    assert _copied(engine)
    # Up again, the copies made without sums are gone: none is read without them.
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert not _copied(engine)
    _assert_one_answer(engine)
    maintain_every_node(engine, NOW)
    assert _copied(engine) >= set(RUNNING)
    _assert_one_answer(engine)
    downgrade(engine, "0004")
    assert "job_open_parts" not in inspect(engine).get_table_names()
    # No trigger is left behind that writes to a table no longer there.
    delete_jobs(engine, ["r-0"], force=True)
    run_job(engine, node("g5-1", "g5.xlarge"), replace(_running("r-1"), ended_s=NOW + 60),
            ticks=1, gpu_j=100.0, from_s=NOW)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert not _copied(engine)
    _assert_one_answer(engine, NOW + 300)
    maintain_every_node(engine, NOW + 300)
    assert _copied(engine) >= {"r-2", "r-3"}
    _assert_one_answer(engine, NOW + 300)
