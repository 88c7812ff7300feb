"""The agent's store writer, on SQLite and on PostgreSQL: nodes and devices, duplicate
ticks, a full buffer, values it refuses; a store that goes away (a SQLite file locked by
another process or whose directory vanished, a PostgreSQL server stopped) keeps the rows
until it returns; the flush interval and its back-off."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from joulestat.core.losses import LossReason
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.nodes import list_nodes, minute_energy_rows, node_devices, node_energy_j
from joulestat.store.writer import RECONNECT_EVERY_S
from tests.helpers.store_rows import DEVICES, T0, raw_count, tick, writer_for
from tests.helpers.stores import Store


def test_writer_registers_node_and_devices(engine):
    writer_for(engine)
    [summary] = list_nodes(engine)
    assert (summary.node, summary.instance_type, summary.region) == ("node-a", "m5.large",
                                                                     "eu-west-1")
    assert node_devices(engine, "node-a") == sorted(DEVICES, key=lambda d: d.component)


def test_same_tick_twice_is_counted_once_and_a_restart_adds_nothing(engine):
    writer = writer_for(engine)
    writer.add(tick(T0 + 1))
    writer.add(tick(T0 + 1))  # twice in one batch
    assert writer.flush()
    writer.add(tick(T0 + 1))  # and again in a later batch
    writer.add(tick(T0 + 2))
    assert writer.flush()
    assert raw_count(engine) == 4
    assert node_energy_j(engine, "node-a", T0, T0 + 60) == {("cpu", "0"): 20.0,
                                                            ("accelerator", "0"): 200.0}
    writer.maintain(T0 + 120)
    writer.maintain(T0 + 120)
    assert [r.energy_j for r in minute_energy_rows(engine, "node-a", T0, T0 + 60)] == [
        200.0, 20.0]  # accelerator, cpu
    writer_for(engine)  # a restart registers again
    assert [n.node for n in list_nodes(engine)] == ["node-a"]
    assert node_devices(engine, "node-a") == sorted(DEVICES, key=lambda d: d.component)


def test_locked_sqlite_database_keeps_rows_and_writes_them_later(sqlite_store: Store, caplog):
    db_url, engine = sqlite_store.url, sqlite_store.engine
    locked = make_engine(db_url, busy_timeout_s=0.05)
    writer = writer_for(locked)
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    other.execute("BEGIN EXCLUSIVE")
    for i in range(1, 11):
        writer.add(tick(T0 + i))
    with caplog.at_level(logging.WARNING, logger="joulestat.store.writer"):
        assert not writer.flush()
        assert writer.maintain(T0 + 600) is None
    assert writer.buffered_rows == 20
    assert "keeping 20 rows in memory" in caplog.text and "locked" in caplog.text
    other.rollback()
    other.close()
    assert writer.flush() and writer.buffered_rows == 0
    assert node_energy_j(engine, "node-a", T0, T0 + 60) == {("cpu", "0"): 100.0,
                                                            ("accelerator", "0"): 1000.0}


def test_sqlite_database_whose_directory_went_away_keeps_rows_until_it_exists(tmp_path,
                                                                             caplog):
    directory = tmp_path / "later"
    directory.mkdir()
    url = f"sqlite:///{directory / 'store.db'}"
    engine = make_engine(url)
    directory.rmdir()  # the volume went away after the agent started
    with caplog.at_level(logging.WARNING, logger="joulestat.store.writer"):
        writer = writer_for(engine)
        writer.add(tick(T0 + 1))
        assert not writer.flush()
    assert "cannot register node 'node-a'" in caplog.text
    assert writer.buffered_rows == 2
    directory.mkdir()
    migrate.upgrade(engine)
    assert writer.flush()
    assert [n.node for n in list_nodes(engine)] == ["node-a"]
    assert raw_count(engine) == 2


def test_full_buffer_drops_oldest_rows_and_says_how_many(engine, caplog):
    writer = writer_for(engine, max_batch_rows=10, max_buffered_rows=100)
    with caplog.at_level(logging.ERROR, logger="joulestat.store.writer"):
        for i in range(1, 76):  # 150 rows and no flush, as while the store is away
            writer.add(tick(T0 + i))
    # Over the bound (102 rows) it drops down to 90 (10 % headroom), five times here.
    assert writer.dropped_rows == 60 and writer.buffered_rows == 90
    assert "dropped the 12 oldest rows (ticks ending" in caplog.text
    # Said once (the later drops log at DEBUG until the store takes rows again).
    assert caplog.text.count("row buffer full") == 1, caplog.text
    assert writer.flush()
    assert raw_count(engine) == 90
    energy = node_energy_j(engine, "node-a", T0 + 30, T0 + 75)
    assert energy == {("cpu", "0"): 450.0, ("accelerator", "0"): 4500.0}  # the newest survived
    # What was dropped is counted with its amount: 30 ticks of 110 J (issue 47).
    assert writer.losses.joules()[LossReason.BUFFER_DROPPED] == pytest.approx(3300.0)
    assert writer.losses.seconds()[LossReason.BUFFER_DROPPED] == pytest.approx(30.0)


def test_full_buffer_folds_job_rows_before_dropping_any_node_row(engine, caplog):
    """Twenty jobs' shares fill the buffer: who used the oldest ticks' energy is folded
    into their unattributed rows, but every tick of node energy is kept."""
    from joulestat.core.records import Share
    from joulestat.store.nodes import unattributed_check

    writer = writer_for(engine, max_batch_rows=50, max_buffered_rows=400)
    jobs = [f"job-{n}" for n in range(20)]
    with caplog.at_level(logging.ERROR, logger="joulestat.store.writer"):
        for i in range(1, 31):
            t = tick(T0 + i)
            writer.add(t)
            writer.add_shares(t, [Share(j, "cpu", "0", "rapl", 0.4, 0.1) for j in jobs]
                              + [Share(None, "cpu", "0", "rapl", 0.0, 0.0)])
            writer.add_units(jobs[0], t.t1_s, {"sample": 1.0})
    assert writer.dropped_rows == 0 and writer.folded_rows > 0
    assert "folded the job shares of the ticks ending" in caplog.text
    # The jobs' energy folded into unattributed is counted: whole ticks of 20 x 0.5 J.
    folded_j = writer.losses.joules()[LossReason.BUFFER_FOLDED]
    assert folded_j > 0 and folded_j == pytest.approx(10.0 * round(folded_j / 10.0))
    assert "node energy is kept whole" in caplog.text
    assert "job rows arrive faster than the store thread writes them" in caplog.text
    assert writer.flush()
    assert raw_count(engine) == 60  # all 30 ticks, cpu and accelerator
    assert node_energy_j(engine, "node-a", T0, T0 + 31) == {("cpu", "0"): 300.0,
                                                            ("accelerator", "0"): 3000.0}
    for _t, component, _d, node_j, sum_j in unattributed_check(engine, "node-a"):
        if component == "cpu":
            assert sum_j == pytest.approx(node_j)


def test_maybe_flush_waits_for_the_interval_and_backs_off_on_failure(sqlite_store: Store):
    """The interval, and the probes while a (locked) store is away."""
    db_url, engine = sqlite_store.url, sqlite_store.engine
    writer = writer_for(engine, flush_interval_s=5.0)
    writer.add(tick(T0 + 1))
    assert writer.maybe_flush(100.0)  # first call flushes at once
    writer.add(tick(T0 + 2))
    assert not writer.maybe_flush(104.0) and writer.buffered_rows == 2
    assert writer.maybe_flush(105.0) and writer.buffered_rows == 0

    other = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=0)
    writer.engine = make_engine(db_url, busy_timeout_s=0.01)
    other.execute("BEGIN EXCLUSIVE")
    writer.add(tick(T0 + 3))
    assert not writer.maybe_flush(110.0)  # fails: next full write in 10 s, not 5
    # While the store is away, a probe every RECONNECT_EVERY_S asks whether it is back.
    assert not writer.maybe_flush(110.0 + RECONNECT_EVERY_S) and writer.buffered_rows == 2
    assert writer.due_in_s(110.0 + RECONNECT_EVERY_S) == pytest.approx(RECONNECT_EVERY_S)
    other.rollback()
    assert not writer.maybe_flush(110.0 + 1.5 * RECONNECT_EVERY_S)  # between probes
    # The store is back: the next probe finds it and the rows go in then, not at 120 s.
    assert writer.maybe_flush(110.0 + 2 * RECONNECT_EVERY_S) and writer.buffered_rows == 0
    other.close()


def test_non_finite_energy_is_skipped_not_written(engine, caplog):
    writer = writer_for(engine)
    with caplog.at_level(logging.WARNING, logger="joulestat.store.writer"):
        writer.add(tick(T0 + 1, cpu_j=float("nan")))
    assert writer.buffered_rows == 1 and "non-finite" in caplog.text
    assert writer.flush()


def test_a_stopped_postgresql_server_keeps_rows_until_it_returns(pg_store: Store,
                                                                  caplog) -> None:
    engine, server = pg_store.engine, pg_store.server
    writer = writer_for(engine)
    writer.add(tick(T0 + 1))
    assert writer.flush()
    assert server.stop().returncode == 0
    try:
        writer.add(tick(T0 + 2))
        writer.add(tick(T0 + 3))
        with caplog.at_level(logging.WARNING, logger="joulestat.store.writer"):
            assert not writer.flush()
            assert writer.maintain(T0 + 700) is None
        assert "keeping 4 rows in memory" in caplog.text
        assert writer.buffered_rows == 4
    finally:
        assert server.start().returncode == 0, server.log_tail()
    assert writer.flush() and writer.buffered_rows == 0
    assert node_energy_j(engine, "node-a", T0, T0 + 60) == {("cpu", "0"): 30.0,
                                                            ("accelerator", "0"): 300.0}

