"""The outage spool, on SQLite and on PostgreSQL: rows the store did not take (it
refuses every insert meanwhile: tests/helpers/stores.py) wait on disk, survive a restart
(a new writer on the same spool directory) and are written back once, oldest first; the
spool is bounded, and a full disk is said once with memory still bounded."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.core.losses import LossReason
from joulestat.core.records import DeviceInfo, NodeInfo, Share
from joulestat.core.tick import Tick, TickEntry
from joulestat.store.durability import Spool
from joulestat.store.writer import StoreWriter
from tests.helpers.stores import Store, refused_inserts

NODE = NodeInfo("node-a", "g5.xlarge", "us-east-1", "Xeon", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl")]
T0 = 1_700_000_040.0


def tick(t1_s: float) -> Tick:
    return Tick(t1_s - 1.0, t1_s, (TickEntry("cpu", "0", "rapl", 10.0),))


def stored(engine: Engine) -> tuple[int, float, float]:
    with engine.connect() as connection:
        ticks, energy = connection.execute(text(
            "SELECT count(*), sum(energy_j) FROM tick_energy")).one()
        shares = connection.execute(text("SELECT sum(dynamic_j + idle_j) FROM job_energy "
                                         "WHERE job_id = 'j'")).scalar()
    return ticks, energy, shares


def feed(writer: StoreWriter, first: int, count: int) -> None:
    for i in range(first, first + count):
        t = tick(T0 + i)
        writer.add(t)
        writer.add_shares(t, [Share("j", "cpu", "0", "rapl", 6.0, 0.0),
                              Share(None, "cpu", "0", "rapl", 4.0, 0.0)])


def test_an_outage_waits_on_disk_and_is_written_once_after_a_restart(store: Store,
                                                                     tmp_path: Path) -> None:
    engine = store.engine
    spool_dir = tmp_path / "spool"
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=600,
                         spool=Spool(spool_dir))
    feed(writer, 1, 5)
    assert writer.flush()
    # The store goes away: every write fails.
    with refused_inserts(engine, "tick_energy"):
        for batch in range(3):
            feed(writer, 6 + 5 * batch, 5)
            assert not writer.flush()
    assert writer.buffered_rows == 0 and writer.spooled_rows == 45  # 15 ticks, 3 rows each
    assert len(list(spool_dir.glob("*.json"))) == 3
    # The agent dies here (no close): a new writer on the same spool, store back.
    again = StoreWriter(store.open(), NODE, DEVICES, raw_retention_s=600,
                        spool=Spool(spool_dir))
    assert again.spool.bytes > 0
    assert again.flush()
    assert not list(spool_dir.glob("*.json")) and not again.spool
    assert stored(engine) == (20, 200.0, 120.0)
    # A segment written back twice (crash between commit and delete) is stored once.
    replay = Spool(tmp_path / "replay")
    batch_writer = StoreWriter(store.open(), NODE, DEVICES, raw_retention_s=600)
    feed(batch_writer, 21, 2)
    batch, pending = batch_writer.queue.rows, batch_writer.queue.pending
    replay.append(batch, pending)
    replay.append(batch, pending)
    replaying = StoreWriter(store.open(), NODE, DEVICES, raw_retention_s=600,
                            spool=replay)
    assert replaying.flush()
    assert stored(engine) == (22, 220.0, 132.0)


def test_the_spool_is_bounded_and_says_what_it_dropped(store: Store, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    engine = store.engine
    spool = Spool(tmp_path / "spool", max_bytes=1500)
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=600, spool=spool)
    with refused_inserts(engine, "tick_energy"):
        for batch in range(6):
            feed(writer, 1 + 3 * batch, 3)
            writer.flush()
    assert spool.dropped_batches > 0 and spool.bytes <= 1500
    assert "dropped its oldest batch (" in caplog.text and "ticks ending" in caplog.text
    # The rows of the dropped batches are the writer's dropped figure, said once.
    assert writer.dropped_rows == spool.dropped_rows == 9 * spool.dropped_batches
    said = [r for r in caplog.records if "dropped its oldest batch" in r.getMessage()]
    assert [r.levelname for r in said] == ["ERROR"] + ["WARNING"] * (len(said) - 1)
    assert len(said) == spool.dropped_batches
    # Each drop says, and the lost-energy metric counts, what it cost: 3 ticks of 10 J,
    # 18 J of them the job's (issue 47).
    assert all("30.0 J of the node's energy over 3.0 s (18.0 J of it jobs')"
               in r.getMessage() for r in said), [r.getMessage() for r in said]
    assert writer.losses.joules()[LossReason.SPOOL_DROPPED] == 30.0 * spool.dropped_batches
    assert writer.losses.seconds()[LossReason.SPOOL_DROPPED] == 3.0 * spool.dropped_batches
    assert writer.flush()
    with engine.connect() as connection:
        first = connection.execute(text("SELECT min(t_end_ms) FROM tick_energy")).scalar()
    assert first > round((T0 + 1) * 1000)  # the newest batches are the ones kept


def test_a_full_spool_disk_is_said_once_counted_and_memory_stays_bounded(
        store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine = store.engine
    spool = Spool(tmp_path / "spool")
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=600, spool=spool,
                         max_batch_rows=10, max_buffered_rows=30)
    refusing = refused_inserts(engine, "tick_energy")
    refusing.__enter__()

    def disk_full(_batch: object, _pending: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool, "append", disk_full)
    for batch in range(8):  # 8 failed flushes of 3 ticks (9 rows) each: 72 rows
        feed(writer, 1 + 3 * batch, 3)
        writer.flush()
    assert writer.spool_write_failures == 8
    assert writer.buffered_rows <= 30  # the memory bound holds
    assert writer.dropped_rows > 0 and writer.dropped_rows + writer.buffered_rows <= 72
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert sum("cannot spool" in m for m in errors) == 1, errors  # said once
    assert sum("node ticks alone" in m for m in errors) == 1, errors
    monkeypatch.undo()
    refusing.__exit__(None, None, None)
    assert writer.flush()
    ticks, _energy, _shares = stored(engine)
    assert writer.buffered_rows == 0 and ticks > 0  # what memory held went in


def test_finished_jobs_are_reported_final_once_their_rows_are_stored(store: Store,
                                                                    tmp_path: Path) -> None:
    """The writer holds the ids of finished jobs, never the registry's jobs, and tells
    ``on_final`` after the flush that stored the rows buffered with them: not while an
    outage keeps those rows in the spool, and once."""
    told: list[list[str]] = []
    writer = StoreWriter(store.engine, NODE, DEVICES, raw_retention_s=600,
                         spool=Spool(tmp_path / "spool"), on_final=told.append)
    feed(writer, 1, 3)
    writer.finish_jobs(["j"])
    with refused_inserts(store.engine, "tick_energy"):
        assert not writer.flush()
    assert told == [] and writer.spooled_rows == 9
    assert writer.flush()
    assert told == [["j"]] and stored(store.engine) == (3, 30.0, 18.0)
    assert writer.flush()
    assert told == [["j"]]
