"""The outage spool: rows the store did not take wait on disk, survive a restart (a new
writer on the same spool directory) and are written back once, oldest first."""

from __future__ import annotations

import errno
import sqlite3
import stat
import subprocess
import sys
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


def test_a_full_spool_disk_is_said_once_counted_and_memory_stays_bounded(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    spool = Spool(tmp_path / "spool")
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=600, spool=spool,
                         max_batch_rows=10, max_buffered_rows=30)
    blocker = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    blocker.execute("BEGIN EXCLUSIVE")
    writer.engine = make_engine(db_url, busy_timeout_s=0.01)

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
    blocker.rollback()
    blocker.close()
    writer.engine = engine
    assert writer.flush()
    ticks, _energy, _shares = stored(db_url)
    assert writer.buffered_rows == 0 and ticks > 0  # what memory held went in


def test_spool_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Run in a child process with umask 022, as a service manager would start it."""
    code = (
        "import os, sys\n"
        "os.umask(0o022)\n"
        "from pathlib import Path\n"
        "from joulestat.store.durability import Spool\n"
        "from joulestat.store.rows import PendingJobs, RowBuffer\n"
        "rows = RowBuffer()\n"
        "rows.append(1000, 0, 1.0, 0.0, ('tick', '', 'cpu', '0', 'rapl'))\n"
        "Spool(Path(sys.argv[1])).append(rows, PendingJobs())\n"
    )
    directory = tmp_path / "data" / "spool" / "n1"
    result = subprocess.run([sys.executable, "-c", code, str(directory)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for path in (tmp_path / "data", tmp_path / "data" / "spool", directory):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    segments = list(directory.glob("*.json"))
    assert len(segments) == 1
    assert stat.S_IMODE(segments[0].stat().st_mode) == 0o600


def test_one_spool_directory_serves_one_agent_and_knows_its_own_segments(
        tmp_path: Path) -> None:
    """Segments are numbered by each process on its own, so a second agent on one spool
    directory is refused (while the first lives); and what a writer refused its node's
    lease sets aside is its own segments, never those it found there at start."""
    from joulestat.store.durability import SpoolInUse
    from joulestat.store.rows import PendingJobs, RowBuffer

    spool_dir = tmp_path / "spool"
    child = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom joulestat.store.durability import Spool\n"
         f"Spool({str(spool_dir)!r}, exclusive=True)\nprint('held')"],
        capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "held", child.stderr  # let go when its process ends

    def batch(t_end_s: float, checkpoint: bool) -> tuple[RowBuffer, PendingJobs]:
        rows, pending = RowBuffer(), PendingJobs()
        rows.append_tick(tick(t_end_s))
        if checkpoint:
            pending.save_checkpoint({"sampler": {"at": t_end_s}}, "boot", t_end_s)
        return rows, pending

    earlier = Spool(spool_dir)
    earlier.append(*batch(T0 + 1, checkpoint=True))
    spool = Spool(spool_dir, exclusive=True)
    with pytest.raises(SpoolInUse, match="in use by another process"):
        Spool(spool_dir, exclusive=True)
    spool.append(*batch(T0 + 2, checkpoint=True))
    spool.append(*batch(T0 + 3, checkpoint=False))
    # The newest checkpoint, even when the newest segment holds none.
    assert spool.latest_checkpoint() == {"saved_s": T0 + 2, "boot_id": "boot",
                                         "state": {"sampler": {"at": T0 + 2}}}
    assert spool.set_aside_own() == (2, 2, f"ticks ending {T0 + 2:.3f}..{T0 + 3:.3f}")
    assert [p.name for p in sorted(spool_dir.glob("0*"))] == [
        "000000000001.json", "000000000002.refused", "000000000003.refused"]
    assert [int(s.path.stem) for s in spool.segments()] == [1]
