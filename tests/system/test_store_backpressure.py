"""Back-pressure as an operator meets it with the real agent: during a store outage the
spool is private and, once the store returns, the rows go in within seconds (the
doubling retry alone left the agent away 15 s and more)."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import agent_at_head, in_memory, wait_for

POWER_W = 50.0
INTERVAL_S = 0.25
RETURN_WITHIN_S = 5.0  # the reconnect probe runs every 2 s; slack for a loaded machine


def _last_tick_ms(db_path: Path) -> int:
    with sqlite3.connect(db_path, timeout=30) as connection:
        return connection.execute(
            "SELECT coalesce(max(t_end_ms), 0) FROM tick_energy WHERE node = 'n1'"
        ).fetchone()[0]


@pytest.mark.slow
def test_rows_go_in_within_seconds_of_the_stores_return_and_the_spool_is_private(
        tmp_path: Path) -> None:
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0")
    db_path, spool = tmp_path / "agent.db", tmp_path / "spool"
    old_umask = os.umask(0o022)  # the agent inherits it, as from a service manager
    try:
        with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500), \
                agent_at_head(tmp_path, "--sysfs-root", str(tmp_path / "sys"),
                              "--interval", str(INTERVAL_S), "--node", "n1") as agent:
            wait_for(lambda: db_path.exists() and _last_tick_ms(db_path), timeout_s=30)
            blocker = sqlite3.connect(db_path, timeout=30, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            outage_started = time.monotonic()
            # Long enough that the doubling retry is past 8 s between attempts.
            wait_for(lambda: agent.value("joulestat_agent_store_up") == 0, timeout_s=30)
            wait_for(lambda: time.monotonic() - outage_started >= 20
                     and len(list(spool.glob("*.json"))) >= 2, timeout_s=60, every_s=0.5)
            assert stat.S_IMODE(spool.stat().st_mode) == 0o700
            for segment in spool.glob("*.json"):
                assert stat.S_IMODE(segment.stat().st_mode) == 0o600, segment
            # Release right after a failed write (its batch just spooled): the doubling
            # alone would wait 8 s or more from here; the probe finds the store in 2 s.
            seen = len(list(spool.glob("*.json")))
            wait_for(lambda: len(list(spool.glob("*.json"))) > seen, timeout_s=60,
                     every_s=0.05)
            blocker.execute("COMMIT")
            blocker.close()
            returned = time.monotonic()
            returned_ms = int(time.time() * 1000)
            wait_for(lambda: agent.value("joulestat_agent_store_up") == 1
                     and _last_tick_ms(db_path) >= returned_ms - 1000
                     and not list(spool.glob("*.json")), timeout_s=30, every_s=0.1)
            back_after_s = time.monotonic() - returned
            assert back_after_s <= RETURN_WITHIN_S, back_after_s
            assert agent.value("joulestat_agent_store_rows_total", outcome="dropped") == 0
            assert agent.value("joulestat_agent_spool_write_failures_total") == 0
            print(f"store back: rows in after {back_after_s:.2f} s")
    finally:
        os.umask(old_umask)
