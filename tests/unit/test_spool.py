"""The outage spool: rows the store did not take wait on disk, survive a restart (a new
writer on the same spool directory) and are written back once, oldest first."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from joulestat.attribution.shares import Share
from joulestat.core.tick import Tick, TickEntry
from joulestat.devices.sensor import DeviceInfo
from joulestat.host.identity import NodeInfo
from joulestat.store import migrate
from joulestat.store.durability import Spool
from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter

NODE = NodeInfo("node-a", "g5.xlarge", "us-east-1", "Xeon", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl")]
T0 = 1_700_000_040.0


def tick(t1_s: float) -> Tick:
    return Tick(t1_s - 1.0, t1_s, (TickEntry("cpu", "0", "rapl", 10.0),))


def stored(db_url: str) -> tuple[int, float, float]:
    connection = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    try:
        ticks, energy = connection.execute(
            "SELECT count(*), sum(energy_j) FROM tick_energy").fetchone()
        shares = connection.execute("SELECT sum(dynamic_j + idle_j) FROM job_energy "
                                    "WHERE job_id = 'j'").fetchone()[0]
    finally:
        connection.close()
    return ticks, energy, shares


def feed(writer: StoreWriter, first: int, count: int) -> None:
    for i in range(first, first + count):
        t = tick(T0 + i)
        writer.add(t)
        writer.add_shares(t, [Share("j", "cpu", "0", "rapl", 6.0, 0.0),
                              Share(None, "cpu", "0", "rapl", 4.0, 0.0)])


def test_an_outage_waits_on_disk_and_is_written_once_after_a_restart(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    spool_dir = tmp_path / "spool"
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=600,
                         spool=Spool(spool_dir))
    feed(writer, 1, 5)
    assert writer.flush()
    # The store goes away: a lock held by someone else makes every write fail.
    blocker = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    blocker.execute("BEGIN EXCLUSIVE")
    writer.engine = make_engine(db_url, busy_timeout_s=0.01)
    for batch in range(3):
        feed(writer, 6 + 5 * batch, 5)
        assert not writer.flush()
    assert writer.buffered_rows == 0 and writer.spooled_rows == 45  # 15 ticks, 3 rows each
    assert len(list(spool_dir.glob("*.json"))) == 3
    # The agent dies here (no close): a new writer on the same spool, store back.
    blocker.rollback()
    blocker.close()
    again = StoreWriter(make_engine(db_url), NODE, DEVICES, raw_retention_s=600,
                        spool=Spool(spool_dir))
    assert again.spool.bytes > 0
    assert again.flush()
    assert not list(spool_dir.glob("*.json")) and not again.spool
    assert stored(db_url) == (20, 200.0, 120.0)
    # A segment written back twice (crash between commit and delete) is stored once.
    replay = Spool(tmp_path / "replay")
    batch_writer = StoreWriter(make_engine(db_url), NODE, DEVICES, raw_retention_s=600)
    feed(batch_writer, 21, 2)
    batch, pending = batch_writer.queue.rows, batch_writer.queue.pending
    replay.append(batch, pending)
    replay.append(batch, pending)
    replaying = StoreWriter(make_engine(db_url), NODE, DEVICES, raw_retention_s=600,
                            spool=replay)
    assert replaying.flush()
    assert stored(db_url) == (22, 220.0, 132.0)


def test_the_spool_is_bounded_and_says_what_it_dropped(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    spool = Spool(tmp_path / "spool", max_bytes=1500)
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=600, spool=spool)
    blocker = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    blocker.execute("BEGIN EXCLUSIVE")
    writer.engine = make_engine(db_url, busy_timeout_s=0.01)
    for batch in range(6):
        feed(writer, 1 + 3 * batch, 3)
        writer.flush()
    blocker.rollback()
    blocker.close()
    assert spool.dropped_batches > 0 and spool.bytes <= 1500
    assert "dropped its oldest batch (" in caplog.text and "ticks ending" in caplog.text
    # The rows of the dropped batches are the writer's dropped figure, said once.
    assert writer.dropped_rows == spool.dropped_rows == 9 * spool.dropped_batches
    errors = [r for r in caplog.records if "dropped its oldest batch" in r.getMessage()
              and r.levelname == "ERROR"]
    assert len(errors) == 1
    assert writer.flush()
    with make_engine(db_url).connect() as connection:
        first = connection.execute(text("SELECT min(t_end_ms) FROM tick_energy")).scalar()
    assert first > round((T0 + 1) * 1000)  # the newest batches are the ones kept
