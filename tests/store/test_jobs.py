"""Per-job energy in the store, on SQLite and on PostgreSQL: idempotent writes, a job on
several nodes, conservation through rollup and retention, restarts, checkpoints, failed
flushes, settled totals; then what only SQLite shows (a database locked by another
process's transaction) and what only PostgreSQL shows (two agents ending one job at once,
waiting on its row lock). Expected values come from attribution's own shares
(tests/helpers/store_jobs.py), never from the store."""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.records import Share
from joulestat.store.durability import (
    Checkpoint,
    load_checkpoint,
    load_ended_job,
    load_unsettled_jobs,
)
from joulestat.store.engine import dialect_insert, make_engine
from joulestat.store.jobs import UnknownJobError, job_detail, list_jobs
from joulestat.store.maintenance import SETTLE_MS
from joulestat.store.rows import PendingJobs, write_pending
from joulestat.store.series import job_energy_series
from tests.helpers.store_jobs import (
    LOADER,
    RETENTION_S,
    T0,
    TRAINER,
    assert_conserved,
    count,
    feed,
    job_total,
    make_job,
    make_tick,
    shares_for,
    summary,
    writer_for,
)
from tests.helpers.stores import Store, refused_inserts


def test_unknown_job_is_a_key_error_with_a_readable_message(engine):
    with pytest.raises(KeyError) as caught:
        job_detail(engine, "nope")
    assert isinstance(caught.value, UnknownJobError)
    assert str(caught.value) == "no job with id 'nope' in the store"


def test_checkpoint_that_is_not_json_is_skipped_but_rows_are_written(engine, caplog):
    writer = writer_for(engine)
    for bad in ({"x": object()}, {"x": float("nan")}):
        t = make_tick(T0 + 1, 30.0, None)
        writer.add(t)
        writer.save_checkpoint(bad, "b", T0)
        with caplog.at_level("ERROR"):
            assert writer.flush()
        assert load_checkpoint(engine, TRAINER.node) is None
        assert "cannot be stored as JSON" in caplog.text
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM tick_energy")).scalar() >= 1


def test_shares_for_one_job_and_device_are_summed_and_none_is_unattributed(engine):
    writer = writer_for(engine)
    t = make_tick(T0 + 1, 30.0, None)
    writer.add(t)
    writer.add_shares(t, [Share("a", "cpu", "0", "rapl", 5.0, 1.0),
                          Share("a", "cpu", "0", "rapl", 2.0, 0.5),
                          Share(None, "cpu", "0", "rapl", 20.0, 1.5)])
    assert writer.flush()
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT job_id, dynamic_j, idle_j FROM job_energy ORDER BY job_id")).all()
    assert [tuple(r) for r in rows] == [("", 20.0, 1.5), ("a", 7.0, 1.5)]
    assert_conserved(engine, TRAINER.node, expected_rows=1)


def test_one_flush_is_one_transaction(engine):
    """A failure while writing shares leaves no tick behind, and a retry writes all once."""
    writer = writer_for(engine)
    writer.save_job(make_job("a", T0))
    feed(writer, T0, 5, ("a",), units={"tokens": 1.0})
    with refused_inserts(engine, "job_energy"):
        assert not writer.flush()
        assert count(engine, "tick_energy") == count(engine, "jobs") == count(
            engine, "job_units") == 0
        assert writer.buffered_rows == 5 * (2 + 4 + 1)  # 2 entries, 2 shares each, 1 unit
    assert writer.flush() and writer.buffered_rows == 0
    # 5 ticks of one minute: each job's count is one window row.
    assert count(engine, "tick_energy") == 10 and count(engine, "job_units") == 1
    assert_conserved(engine, TRAINER.node, expected_rows=2)


def test_locked_sqlite_database_keeps_shares_and_jobs_for_later(sqlite_store: Store, caplog):
    engine, db_url = sqlite_store.engine, sqlite_store.url
    writer = writer_for(make_engine(db_url, busy_timeout_s=0.05))
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    other.execute("BEGIN EXCLUSIVE")
    writer.save_job(make_job("a", T0))
    writer.save_checkpoint({"n": 1}, "boot", T0)
    totals = feed(writer, T0, 10, ("a",), units={"tokens": 2.0})
    with caplog.at_level(logging.WARNING, logger="joulestat.store.writer"):
        assert not writer.flush()
    assert "keeping 70 rows in memory" in caplog.text  # 2 entries, 4 shares, 1 unit a tick
    writer.save_job(make_job("a", T0, {"late": "label"}))  # saved while the DB is away
    other.rollback()
    other.close()
    assert writer.flush()
    found = summary(engine, "a")
    assert found.total_j == pytest.approx(job_total(totals, "a"))
    assert (found.labels, found.units) == ({"late": "label"}, {"tokens": 20.0})
    assert load_checkpoint(engine, TRAINER.node) == (T0, "boot", {"n": 1})


def test_full_buffer_folds_job_shares_then_drops_whole_ticks(engine, caplog):
    # 6 rows a tick (2 entries, 2 job shares, 2 unattributed). Over 50 rows the oldest
    # ticks first lose their job detail (folded into unattributed: 4 rows a tick);
    # only when every buffered tick is folded do whole ticks go, never a part of one.
    writer = writer_for(engine, max_batch_rows=10, max_buffered_rows=50)
    with caplog.at_level(logging.ERROR, logger="joulestat.store.writer"):
        feed(writer, T0, 40, ("a",))  # 240 rows, never flushed
    assert "folded the job shares of the ticks ending" in caplog.text
    assert "node energy is kept whole" in caplog.text
    assert writer.folded_rows > 0
    assert writer.buffered_rows <= 50 + 6
    assert writer.flush()
    # The kept ticks, folded or not, are one minute: one window per component.
    assert count(engine, "tick_energy") // 2 >= 8
    assert_conserved(engine, TRAINER.node, expected_rows=2)
    with engine.connect() as connection:
        newest = connection.execute(text("SELECT max(t_end_ms) FROM tick_energy")).scalar()
        newest_job = connection.execute(text(
            "SELECT max(t_end_ms) FROM job_energy WHERE job_id = 'a'")).scalar()
        oldest_kept = connection.execute(text("SELECT min(t_end_ms) FROM tick_energy")).scalar()
        oldest_job = connection.execute(text(
            "SELECT min(t_end_ms) FROM job_energy WHERE job_id = 'a'")).scalar()
    assert newest == newest_job == round((T0 + 40) * 1000)  # the newest kept their detail
    assert oldest_job > oldest_kept  # older ticks kept their energy, not who used it


def test_batch_put_back_after_a_failure_keeps_its_keys(engine):
    """The failed batch is re-keyed into the newer buffer, whose key table differs."""
    writer = writer_for(engine)
    with refused_inserts(engine, "tick_energy"):
        first = feed(writer, T0, 3, ("a",))
        assert not writer.flush()
    second = feed(writer, T0 + 3, 3, ("b", "a"))  # new keys first, then the old ones
    assert writer.flush()
    with engine.connect() as connection:
        stored = dict(connection.execute(text(
            "SELECT job_id, sum(dynamic_j + idle_j) FROM job_energy GROUP BY job_id")).all())
    assert stored["a"] == pytest.approx(job_total(first, "a") + job_total(second, "a"))
    assert stored["b"] == pytest.approx(job_total(second, "b"))
    # The put-back batch stays a window of its own (as its first attempt wrote it,
    # had that commit reached the store), the newer ticks another: 2 per component.
    assert_conserved(engine, TRAINER.node, expected_rows=4)


def test_a_running_job_adds_its_recent_rows_to_its_settled_totals(engine):
    writer = writer_for(engine)
    writer.save_job(make_job("live", T0))
    totals = feed(writer, T0, 300, ("live",), units={"tokens": 2.0})
    result = writer.maintain(T0 + 300)
    assert result.totals_until_ms == round((T0 + 300) * 1000) - SETTLE_MS
    feed(writer, T0 + 300, 90, ("live",), units={"tokens": 2.0}, totals=totals)
    assert writer.flush()
    with engine.connect() as connection:
        settled_units = connection.execute(text(
            "SELECT count FROM job_unit_totals WHERE job_id = 'live'")).scalar_one()
    assert settled_units == 2.0 * 180  # the ticks ending by T0 + 180 s
    found = summary(engine, "live")
    assert found.total_j == pytest.approx(job_total(totals, "live"), rel=1e-12)
    assert found.units == {"tokens": 2.0 * 390}
    [restored] = load_unsettled_jobs(engine, TRAINER.node)
    assert sum(restored.dynamic_j.values()) + sum(restored.idle_j.values()) == pytest.approx(
        job_total(totals, "live"), rel=1e-12)
    assert restored.units == {"tokens": 2.0 * 390}


def test_every_write_is_idempotent(engine: Engine) -> None:
    writer = writer_for(engine)
    job = make_job("train-7", T0, {"team": "nlp"})
    t = make_tick(T0 + 1, 20.0, 150.0)
    shares = shares_for(t, ("train-7",), 0)
    for _batch in range(2):  # the same things in one batch, then again in a later one
        for _again in range(2):
            writer.save_job(job)
            writer.add(t)
            writer.add_shares(t, shares)
            writer.add_units("train-7", t.t1_s, {"tokens": 100.0})
            writer.save_checkpoint({"rapl": {"0": 123}}, "boot-1", T0 + 1)
        assert writer.flush()
    writer_for(engine).flush()  # a restart registers again and writes nothing new
    assert (count(engine, "tick_energy"), count(engine, "job_energy")) == (2, len(shares))
    assert count(engine, "jobs") == count(engine, "job_nodes") == 1
    assert count(engine, "job_units") == count(engine, "node_checkpoints") == 1
    found = summary(engine, "train-7")
    assert found.total_j == pytest.approx(sum(s.energy_j for s in shares if s.job))
    assert found.units == {"tokens": 100.0}
    assert writer.maintain(T0 + 120) is not None
    assert writer.maintain(T0 + 120) is not None
    assert summary(engine, "train-7").total_j == pytest.approx(found.total_j)
    assert_conserved(engine, TRAINER.node, expected_rows=2)


def test_multi_node_job_is_one_job_with_two_kinds_of_node(engine: Engine) -> None:
    loader, trainer = writer_for(engine, LOADER), writer_for(engine, TRAINER)
    loader.save_job(make_job("dist-1", T0 + 5, {"team": "nlp"}, {11, 12}))
    trainer.save_job(make_job("dist-1", T0 + 2, {"run": "42"}, {7}))
    trainer.save_job(make_job("other", T0 + 3))
    on_loader = feed(loader, T0 + 0.5, 30, ("dist-1",), gpu=False, units={"samples": 8.0})
    on_trainer = feed(trainer, T0, 30, ("dist-1", "other"), units={"tokens": 512.0})
    assert loader.flush() and trainer.flush()

    assert count(engine, "jobs") == 2 and count(engine, "job_nodes") == 3
    found = summary(engine, "dist-1")
    assert found.nodes == (("loader-1", "c5.4xlarge"), ("trainer-1", "p4d.24xlarge"))
    assert found.labels == {"team": "nlp", "run": "42"}
    assert (found.status, found.started_s, found.ended_s) == ("running", T0 + 2, None)
    expected = job_total(on_loader, "dist-1") + job_total(on_trainer, "dist-1")
    assert found.total_j == pytest.approx(expected, rel=1e-12)
    assert found.energy_j("accelerator") == pytest.approx(sum(
        d + i for (j, c), (d, i) in on_trainer.items() if (j, c) == ("dist-1", "accelerator")))
    assert found.units == {"samples": 240.0, "tokens": 30 * 512.0}

    detail = job_detail(engine, "dist-1")
    parts = {p.node: p for p in detail.per_node}
    assert parts["loader-1"].total_j == pytest.approx(job_total(on_loader, "dist-1"))
    assert parts["trainer-1"].total_j == pytest.approx(job_total(on_trainer, "dist-1"))
    assert parts["loader-1"].pids == (11, 12) and parts["trainer-1"].instance_type == (
        "p4d.24xlarge")
    assert parts["loader-1"].units == {"samples": 240.0}
    assert set(parts["loader-1"].dynamic_j) == {"cpu"}  # the loader has no GPU

    # The job ends only when its last node ends it.
    loader.save_job(make_job("dist-1", T0 + 5, ended_s=T0 + 40))
    assert loader.flush()
    assert summary(engine, "dist-1").status == "running"
    assert [j.id for j in list_jobs(engine, running=True)] == ["dist-1", "other"]
    trainer.save_job(make_job("dist-1", T0 + 2, ended_s=T0 + 45))
    assert trainer.flush()
    ended = summary(engine, "dist-1")
    assert (ended.status, ended.ended_s) == ("ended", T0 + 45)
    assert ended.labels == {"team": "nlp", "run": "42"}
    assert [j.id for j in list_jobs(engine, running=False)] == ["dist-1"]
    assert [j.id for j in list_jobs(engine, running=True)] == ["other"]
    assert [j.id for j in list_jobs(engine, node="loader-1")] == ["dist-1"]
    assert list_jobs(engine, running=True, node="loader-1") == []
    # The list's filters, each a clause of the one id query (`joulestat jobs`).
    assert [j.id for j in list_jobs(engine, name="name-other")] == ["other"]
    assert list_jobs(engine, name="name-oth") == []
    assert [j.id for j in list_jobs(engine, kind="training", limit=1)] == ["other"]
    assert [j.id for j in list_jobs(engine, limit=5)] == ["dist-1", "other"]
    # dist-1 ended at T0 + 45 (on its last node); other still runs.
    assert [j.id for j in list_jobs(engine, running=False, since_s=T0 + 46)] == []
    assert [j.id for j in list_jobs(engine, since_s=T0 + 46)] == ["other"]
    assert [j.id for j in list_jobs(engine, running=False, since_s=T0 + 45)] == ["dist-1"]
    assert [j.id for j in list_jobs(engine, limit=1)][0] == "other"  # the newest start
    assert list_jobs(engine, limit=1)[0].total_j == summary(engine, "other").total_j
    # Re-registering reopens it.
    trainer.save_job(make_job("dist-1", T0 + 2))
    assert trainer.flush()
    assert summary(engine, "dist-1").status == "running"


def test_conservation_holds_through_rollup_and_retention(engine: Engine) -> None:
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    totals = feed(writer, T0, 600, ("a", "b"), policy="exclude", units={"tokens": 3.0})
    assert writer.flush()
    # One flush of ten minutes: a job window per minute and component (migration 0009).
    assert_conserved(engine, TRAINER.node, expected_rows=2 * 10)
    before = {s.id: s for s in list_jobs(engine)}
    assert before["a"].total_j == pytest.approx(job_total(totals, "a"), rel=1e-12)
    series_before = job_energy_series(engine, "a")
    assert len(series_before) == 2 * 10
    assert sum(d + i for _t, _c, d, i in series_before) == pytest.approx(before["a"].total_j)
    units_rows = count(engine, "job_units")

    now = T0 + 600 + RETENTION_S - 270  # prunes minutes 0..4, keeps 5..9 raw
    result = writer.maintain(now)
    assert result.raw_pruned_until_ms == round((T0 + 300) * 1000)
    assert result.pruned_rows == 2 * 300
    # The job windows went with the totals (up to 2 minutes before "now", all ten
    # minutes), rolled into minutes; units were one window a minute already, and went
    # into the unit minutes (migration 0014).
    assert result.totals_until_ms == round((T0 + 900) * 1000) - SETTLE_MS
    assert result.job_pruned_rows == 0 and count(engine, "job_energy") == 0
    assert count(engine, "job_units") == 0
    assert count(engine, "job_minute_units") == units_rows == 10 * 2  # 10 minutes x 2 jobs
    # Node: minutes 0..4 rolled, 5..9 raw ticks; jobs: ten minutes; per minute, each.
    assert_conserved(engine, TRAINER.node, expected_rows=2 * 10)
    after = {s.id: s for s in list_jobs(engine)}
    for job in ("a", "b"):
        assert after[job].dynamic_j == pytest.approx(before[job].dynamic_j, rel=1e-12)
        assert after[job].idle_j == pytest.approx(before[job].idle_j, rel=1e-12)
        assert after[job].units == before[job].units == {"tokens": 1800.0}
    series = job_energy_series(engine, "a")
    assert len(series) == 2 * 10  # minutes, as the windows were
    assert series[0][0] == T0 + 60 and series[-1][0] == T0 + 600
    assert sum(d + i for _t, _c, d, i in series) == pytest.approx(before["a"].total_j)

    # A retried tick of a pruned minute is refused, not counted twice.
    late = make_tick(T0 + 10, 20.0, 150.0)
    writer.add(late)
    writer.add_shares(late, shares_for(late, ("a", "b"), 9, "exclude"))
    writer.add_units("a", late.t1_s, {"tokens": 3.0})
    assert writer.flush()
    assert writer.maintain(now).job_pruned_rows == 0
    again = {s.id: s for s in list_jobs(engine)}
    assert again["a"].total_j == pytest.approx(before["a"].total_j, rel=1e-12)
    assert again["a"].units == {"tokens": 1800.0}
    assert writer.dropped_rows == 2 + 3 * 2 + 1


def test_running_jobs_survive_a_restart(engine: Engine) -> None:
    writer = writer_for(engine)
    writer.save_job(make_job("keep", T0 + 1, {"team": "cv"}, {41, 42}))
    writer.save_job(make_job("done", T0, ended_s=T0 + 20))
    writer_for(engine, LOADER).save_job(make_job("elsewhere", T0))
    totals = feed(writer, T0, 20, ("keep", "done"), units={"images": 32.0})
    assert writer.flush()

    [job] = load_unsettled_jobs(engine, TRAINER.node)
    record = job.record
    assert (record.id, record.name, record.kind, record.origin) == (
        "keep", "name-keep", "training", "api")
    assert (record.labels, record.pids, record.started_s, record.ended_s) == (
        {"team": "cv"}, {41, 42}, T0 + 1, None)
    assert job.units == {"images": 640.0}
    for component in ("cpu", "accelerator"):
        dynamic, idle = totals[("keep", component)]
        assert job.dynamic_j[component] == pytest.approx(dynamic, rel=1e-12)
        assert job.idle_j[component] == pytest.approx(idle, rel=1e-12)
    registry = JobRegistry()
    registry.restore(Job.from_stored(job))
    assert registry.get("keep").energy_j == pytest.approx(job_total(totals, "keep"))
    assert load_unsettled_jobs(engine, "no-such-node") == []
    # A job that ended is not put back, but the job API answers for it from the store:
    # only one that ended on this node, with the figures it recorded.
    done = load_ended_job(engine, TRAINER.node, "done")
    assert done is not None and done.record.ended_s == T0 + 20
    assert done.energy_j == pytest.approx(job_total(totals, "done"), rel=1e-12)
    assert done.units == {"images": 640.0}
    assert load_ended_job(engine, TRAINER.node, "keep") is None  # running
    assert load_ended_job(engine, TRAINER.node, "elsewhere") is None  # another node's
    assert load_ended_job(engine, LOADER.node, "done") is None
    assert load_ended_job(engine, TRAINER.node, "no-such-job") is None

    # After pruning the cumulative figures are the same.
    writer.maintain(T0 + 20 + RETENTION_S + 60)
    [reloaded] = load_unsettled_jobs(engine, TRAINER.node)
    assert reloaded.energy_j == pytest.approx(job.energy_j, rel=1e-12)
    assert reloaded.units == job.units
    reloaded_done = load_ended_job(engine, TRAINER.node, "done")
    assert reloaded_done is not None
    assert reloaded_done.energy_j == pytest.approx(done.energy_j, rel=1e-12)


def test_checkpoint_round_trip(engine: Engine) -> None:
    writer = writer_for(engine)
    assert load_checkpoint(engine, TRAINER.node) is None
    state = {"counters": {"rapl:0": 123456789, "nvml:0": 42.5}, "jobs": ["a"]}
    writer.save_checkpoint(state, "boot-1", T0)
    assert load_checkpoint(engine, TRAINER.node) is None  # written with the next flush
    assert writer.flush()
    assert load_checkpoint(engine, TRAINER.node) == Checkpoint(T0, "boot-1", state)
    writer.save_checkpoint({"counters": {}}, "boot-2", T0 + 5)
    writer.save_checkpoint({"counters": {"rapl:0": 1}}, "boot-2", T0 + 6)  # latest wins
    assert writer.flush()
    assert load_checkpoint(engine, TRAINER.node) == (T0 + 6, "boot-2", {"counters": {"rapl:0": 1}})
    assert load_checkpoint(engine, LOADER.node) is None


def test_two_nodes_ending_a_job_at_once_leave_it_ended_on_postgresql(pg_store: Store) -> None:
    """The second agent waits on the jobs row, then sees the first one's end."""
    engine = pg_store.engine
    loader = writer_for(engine, LOADER)
    trainer = writer_for(pg_store.open(), TRAINER)
    loader.save_job(make_job("dist", T0, {"a": "1"}))
    trainer.save_job(make_job("dist", T0, {"b": "2"}))
    assert loader.flush() and trainer.flush()

    ending = PendingJobs()
    ending.save_job(make_job("dist", T0, {"c": "3"}, ended_s=T0 + 40), LOADER)
    with engine.connect() as connection:
        transaction = connection.begin()
        write_pending(connection, dialect_insert(engine), ending, LOADER.node)
        trainer.save_job(make_job("dist", T0, ended_s=T0 + 45))
        flushed: list[bool] = []
        thread = threading.Thread(target=lambda: flushed.append(trainer.flush()))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), "the second agent did not wait for the jobs row lock"
        transaction.commit()
    thread.join(30)
    assert flushed == [True]
    found = job_detail(engine, "dist")
    assert (found.status, found.ended_s) == ("ended", T0 + 45)
    assert found.labels == {"a": "1", "b": "2", "c": "3"}
    assert [j.id for j in list_jobs(engine, running=False)] == ["dist"]

