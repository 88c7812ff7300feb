"""ProcessTable on the real /proc with real processes: children through
task/<tid>/children (a thread's fork included), sleeping processes read for the price of
one schedstat read, a vanished process noticed, and a descriptor budget read past by path.
(A kernel without children files: tests/unit/host/test_processes.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from joulestat.host.processes import ProcessTable
from tests.helpers.agent_process import wait_for

PROC = Path("/proc")
needs_children = pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
    reason="this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)")


def _asleep(pid: int, comm: str | None) -> bool:
    """Whether ``pid`` is sleeping (state S) and, if ``comm`` is given, runs that program."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    name, _, rest = text.partition("(")[2].rpartition(")")
    return rest.split()[0] == "S" and comm in (None, name)


def _wait_children(table: ProcessTable, pid: int, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while True:
        table.begin_tick()
        stat = table.stat(pid)
        assert stat is not None
        children = table.children(pid, stat)
        if children is not None and len(children) >= count:
            return children
        assert time.monotonic() < deadline, children
        time.sleep(0.05)


@needs_children
def test_children_of_a_shell_and_skipped_reads_while_they_sleep() -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    table = ProcessTable(PROC)
    children: list[int] = []
    try:
        children = _wait_children(table, shell.pid, 2)
        assert len(children) == 2
        for pid in children:
            assert table.stat(pid).ppid == shell.pid
        # Let them reach their sleep: the shell waiting, each child exec'd into sleep(1).
        wait_for(lambda: all(_asleep(pid, comm) for pid, comm in
                             [(shell.pid, None)] + [(child, "sleep") for child in children]))
        for _ in range(2):  # the first pass may still see start-up CPU; the next not
            table.begin_tick()
            before = table.full_reads
            for pid in (shell.pid, *children):
                assert table.visit(pid) is not None
        assert table.full_reads == before  # all asleep: their CPU clocks have not moved
        os.kill(children[0], signal.SIGKILL)
        wait_for(lambda: not (PROC / str(children[0])).exists())  # the shell reaped it
        table.begin_tick()
        assert table.stat(children[0]) is None  # its kept descriptor fails: gone
        table.begin_tick()  # the tick after a vanish reads everything in full
        before = table.full_reads
        stat = table.stat(shell.pid)
        assert stat is not None and table.full_reads == before + 1
        assert table.children(shell.pid, stat) == children[1:]
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shell.kill()
        shell.wait()
        table.close()


@needs_children
def test_a_child_forked_by_a_thread_is_found() -> None:
    code = ("import subprocess, threading, time\n"
            "def spawn():\n"
            "    subprocess.Popen(['sleep', '30'])\n"
            "threading.Thread(target=spawn).start()\n"
            "time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    table = ProcessTable(PROC)
    try:
        (child,) = _wait_children(table, parent.pid, 1)
        assert table.stat(child).ppid == parent.pid
        os.kill(child, signal.SIGKILL)
    finally:
        parent.kill()
        parent.wait()
        table.close()


def test_a_descriptor_budget_reads_by_path_past_it() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    table = ProcessTable(PROC, max_open_fds=0)
    try:
        stat = table.stat(sleeper.pid)
        assert stat is not None and stat.pid == sleeper.pid
        assert table._open_fds == 0
        sleeper.kill()
        sleeper.wait()
        table.begin_tick()
        assert table.stat(sleeper.pid) is None
    finally:
        table.close()
