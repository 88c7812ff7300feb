"""The outage spool as processes meet it: a spool made under a service manager's umask
022 is private (0700 folders, 0600 segments), and one spool directory serves one agent
process at a time (its lock is let go when the process ends)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from joulestat.core.tick import Tick, TickEntry
from joulestat.store.durability import Spool

T0 = 1_700_000_040.0


def tick(t1_s: float) -> Tick:
    return Tick(t1_s - 1.0, t1_s, (TickEntry("cpu", "0", "rapl", 10.0),))


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

