"""Per-job energy in the store on SQLite: the scenarios of :mod:`tests.helpers.store_jobs`
(which tests/integration/test_store_postgres.py also runs on PostgreSQL), then what only
SQLite shows: a locked database, a failed flush, a full buffer, settled totals."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from sqlalchemy import text

from joulestat.attribution.shares import Share
from joulestat.store.durability import load_checkpoint, load_running_jobs
from joulestat.store.engine import make_engine
from joulestat.store.jobs import UnknownJobError, job_detail
from joulestat.store.maintenance import SETTLE_MS
from tests.helpers.store_jobs import (
    T0,
    TRAINER,
    assert_conserved,
    check_checkpoint_round_trip,
    check_conservation_and_retention,
    check_every_write_is_idempotent,
    check_multi_node_job_is_one_job,
    check_running_jobs_survive_a_restart,
    check_upgrades_keep_figures,
    count,
    feed,
    job_total,
    make_job,
    make_tick,
    summary,
    writer_for,
)


def test_every_write_is_idempotent(engine):
    check_every_write_is_idempotent(engine)


def test_multi_node_job_is_one_job_with_two_kinds_of_node(engine):
    check_multi_node_job_is_one_job(engine)


def test_conservation_holds_through_rollup_and_retention(engine):
    check_conservation_and_retention(engine)


def test_running_jobs_survive_a_restart(engine):
    check_running_jobs_survive_a_restart(engine)


def test_checkpoint_round_trip(engine):
    check_checkpoint_round_trip(engine)


def test_upgrades_keep_figures(db_url):
    engine = make_engine(db_url)
    check_upgrades_keep_figures(engine)
    engine.dispose()


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


def test_one_flush_is_one_transaction(db_url, engine):
    """A failure while writing shares leaves no tick behind, and a retry writes all once."""
    writer = writer_for(engine)
    writer.save_job(make_job("a", T0))
    feed(writer, T0, 5, ("a",), units={"tokens": 1.0})
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON job_energy "
            "BEGIN SELECT RAISE(ABORT, 'refused by test'); END")
    assert not writer.flush()
    assert count(engine, "tick_energy") == count(engine, "jobs") == count(engine, "job_units") == 0
    assert writer.buffered_rows == 5 * (2 + 4 + 1)  # 2 entries, 2 shares each, 1 unit
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TRIGGER refuse")
    assert writer.flush() and writer.buffered_rows == 0
    # 5 ticks of one minute: each job's count is one window row.
    assert count(engine, "tick_energy") == 10 and count(engine, "job_units") == 1
    assert_conserved(engine, TRAINER.node, expected_rows=2)


def test_locked_database_keeps_shares_and_jobs_for_later(db_url, engine, caplog):
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


def test_batch_put_back_after_a_failure_keeps_its_keys(engine, db_url):
    """The failed batch is re-keyed into the newer buffer, whose key table differs."""
    writer = writer_for(make_engine(db_url, busy_timeout_s=0.05))
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    other.execute("BEGIN EXCLUSIVE")
    first = feed(writer, T0, 3, ("a",))
    assert not writer.flush()
    second = feed(writer, T0 + 3, 3, ("b", "a"))  # new keys first, then the old ones
    other.rollback()
    other.close()
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
    [restored] = load_running_jobs(engine, TRAINER.node)
    assert sum(restored.dynamic_j.values()) + sum(restored.idle_j.values()) == pytest.approx(
        job_total(totals, "live"), rel=1e-12)
    assert restored.units == {"tokens": 2.0 * 390}


def test_migration_0014_moves_unit_minutes_out_of_job_units(db_url):
    from tests.helpers.store_jobs import check_0014_moves_unit_minutes

    check_0014_moves_unit_minutes(make_engine(db_url))


def test_migration_0011_keeps_job_minutes(db_url):
    from tests.helpers.store_jobs import check_0011_keeps_job_minutes

    check_0011_keeps_job_minutes(make_engine(db_url))


def test_migration_0010_splits_job_totals_by_their_sources(db_url):
    from tests.helpers.store_jobs import check_0010_keeps_sources

    check_0010_keeps_sources(make_engine(db_url))


def test_migration_0009_keeps_figures_of_a_store_written_before_it(db_url):
    from tests.helpers.store_jobs import check_0009_keeps_figures

    check_0009_keeps_figures(make_engine(db_url))
