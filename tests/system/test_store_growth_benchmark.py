"""benchmarks/store_growth.py's ``--start``: the simulated run starts when it says (an
hour across midnight UTC grows PostgreSQL's store more than one within a day, so
figures to compare are taken from one start), and a time it cannot read is refused,
naming the flag."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = REPO / "benchmarks" / "store_growth.py"


def test_the_simulated_run_starts_at_start(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.store_growth import _utc_start, measure, sqlite_size
    finally:
        sys.path.remove(str(REPO))
    path = tmp_path / "growth.db"
    start_s = _utc_start("2026-12-07T23:59")  # no offset: UTC
    assert start_s == datetime(2026, 12, 7, 23, 59, tzinfo=UTC).timestamp()
    measure("sqlite", f"sqlite:///{path}", lambda engine: sqlite_size(engine, path),
            jobs=1, seconds=120, start_s=start_s)
    with sqlite3.connect(path) as connection:
        first_ms, last_ms = connection.execute(
            "SELECT min(t_end_ms), max(t_end_ms) FROM tick_energy").fetchone()
    assert first_ms == (start_s + 1) * 1000  # the first tick ends a second in
    assert last_ms == (start_s + 120) * 1000  # across midnight, as asked


def test_a_start_that_is_no_time_is_refused_naming_the_flag() -> None:
    result = subprocess.run([sys.executable, str(BENCHMARK), "--start", "noon"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--start" in result.stderr and "'noon'" in result.stderr
