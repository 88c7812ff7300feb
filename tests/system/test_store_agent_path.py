"""The agent's store path as a fresh interpreter loads it: engine, head check, writer
with jobs, restart reads. No Alembic and no ORM are imported, and the peak memory stays
small; only a process of its own shows what an import pulls in."""

from __future__ import annotations

import subprocess
import sys

from joulestat.store import migrate


def test_agent_path_imports_neither_alembic_nor_the_orm(tmp_path):
    """The agent's path (engine, is_at_head, writer with jobs, restart reads) stays light."""
    db = tmp_path / "light.db"
    migrate.upgrade(f"sqlite:///{db}")
    script = f"""
import sys
from joulestat.core.records import NodeInfo
from joulestat.store.engine import make_engine
from joulestat.store.migrate import is_at_head
from joulestat.store.writer import StoreWriter
from joulestat.core.tick import Tick, TickEntry
from joulestat.core.records import Share
from joulestat.core.records import JobRecord
from joulestat.store.durability import load_checkpoint, load_unsettled_jobs
engine = make_engine("sqlite:///{db}")
assert is_at_head(engine)
writer = StoreWriter(engine, NodeInfo("n", "t", "r", "c", "v"), [], raw_retention_s=600)
writer.save_job(JobRecord(id="j", name="j", kind="training", labels={{}}, pids=frozenset({{1}}),
                          started_s=1e9))
for i in range(5000):
    tick = Tick(1e9 + i, 1e9 + i + 1, (TickEntry("cpu", "0", "rapl", 1.0),))
    writer.add(tick)
    writer.add_shares(tick, [Share("j", "cpu", "0", "rapl", 0.5, 0.25),
                             Share(None, "cpu", "0", "rapl", 0.25, 0.0)])
    writer.add_units("j", tick.t1_s, {{"tokens": 1.0}})
writer.save_checkpoint({{"c": 1}}, "boot", 1e9)
writer.maybe_flush(0.0)
writer.maintain(1e9 + 5001)
assert load_checkpoint(engine, "n") is not None
assert load_unsettled_jobs(engine, "n")[0].units == {{"tokens": 5000.0}}
heavy = sorted(m for m in sys.modules if m.startswith(("alembic", "sqlalchemy.orm")))
# VmHWM, not ru_maxrss: that one carries the parent's peak across fork + exec.
with open("/proc/self/status") as status:
    peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(peak_kib // 1024, heavy)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=1)
    peak_mib, heavy = int(out[0]), out[1].strip()
    assert heavy == "[]"
    # The whole agent must stay under 50 MiB; Python + SQLAlchemy alone take ~40 of it.
    assert peak_mib < 46, f"store path peak RSS {peak_mib} MiB"

