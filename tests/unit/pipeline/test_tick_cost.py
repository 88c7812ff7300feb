"""What one steady tick of the whole agent costs, counted rather than timed (issue 48).

A tick's CPU must follow its sensors and its jobs, never the node's other processes.
Timings cannot hold that in a test (they change with the machine), counts can: on the
agent's own pipeline over a fake node (``tests/helpers/tick_node.py``: RAPL, /proc,
cgroup v2; N jobs of three processes, one in five in a cgroup of its own; K sleeping
processes that belong to no job) these tests count, during steady ticks,

- every file read (by path or again through a kept descriptor), directory listed,
  file stat'ed and process CPU clock read: exactly what the sensors and the jobs
  need, the same with 2,000 unrelated processes as with 10;
- the Python function calls made: the same for K = 10 and K = 2,000, and at most
  ``CALLS_FIXED + CALLS_PER_JOB * N`` a tick.

Why these bounds, and how to change them. What a tick needs (:func:`needed`) is written
from what the node holds, not from the code: the sensors' four files (two RAPL
counters, ``/proc/stat``, ``/proc/net/dev``) and the RAPL class listing (a zone that
appears is picked up); per job read from its process tree, the busy registered
process's ``stat`` and ``children`` files and every process's CPU clock (a sleeping one
is not read further); per job measured by its cgroup, its registered process's clock
and ``stat`` and the cgroup's ``cpu.stat`` (plus an ``fstat``: whether the cgroup was
removed). A tick that reads more fails, naming the files. The call bounds sit about 15 %
over what a tick made when they were set (Python 3.11: 219 calls + 40 a job a tick),
so doubling the work per job fails at 50 jobs and doubling the fixed work fails at 10
(:func:`test_the_call_bounds_catch_doubled_work` checks the arithmetic). A change that
must read or call more changes :func:`needed` or the two constants in the same commit,
saying why; ``-s`` prints the counts measured (``pytest -s -k tick_cost``), and
benchmarks/tick_budget.py shows what they cost in time.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.tick_node import (
    ZONES,
    FakeNode,
    IoCount,
    cgroup_path,
    counting_calls,
    counting_io,
    fake_node,
)

JOBS = (10, 50)
UNRELATED = (10, 2000)
# Python calls a tick may make: CALLS_FIXED + CALLS_PER_JOB * jobs (see the module doc).
CALLS_FIXED = 250
CALLS_PER_JOB = 46
# What they were when set, per tick at 10 and 50 jobs (the doubling check's baseline).
CALLS_SET = {10: 619, 50: 2219}
CALL_TICKS = 10  # the idle power is recomputed one tick in ten: count whole rounds


def needed(node: FakeNode) -> IoCount:
    """What one steady tick of ``node`` needs to read, from what the node holds."""
    need = IoCount()
    need.reads.update(["proc/stat", "proc/net/dev"])
    for zone_id, _name, _power in ZONES:
        zone = node.powercap.zone_dir(zone_id).relative_to(node.powercap.root.parent)
        need.reads[f"{zone}/energy_uj"] += 1
    need.listings["sys/class/powercap"] += 1
    for job_id in node.tree_jobs:
        root = node.roots[job_id]
        need.reads.update([f"proc/{root}/stat", f"proc/{root}/task/{root}/children"])
        need.cpu_clocks.update(pid for pid, p in node.proc.procs.items()
                               if pid == root or p.ppid == root)
    for job_id in node.cgroup_jobs:
        root = node.roots[job_id]
        counter = f"sys/fs/cgroup{cgroup_path(job_id)}/cpu.stat"
        need.reads.update([f"proc/{root}/stat", counter])
        need.stats[counter] += 1
        need.cpu_clocks[root] += 1
    return need


def one_tick_io(node: FakeNode, tmp: Path) -> IoCount:
    node.step()
    with counting_io(tmp) as count:
        node.tick()
    return count


def calls_per_tick(node: FakeNode) -> float:
    total = 0
    for _ in range(CALL_TICKS):
        node.step()
        with counting_calls() as calls:
            node.tick()
        total += sum(calls.values())
    return total / CALL_TICKS


def tick_counts(tmp: Path, jobs: int, unrelated: int, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[FakeNode, IoCount, float, IoCount]:
    """(the node, one steady tick's file work, Python calls a tick, what it needs)."""
    with monkeypatch.context() as patch, fake_node(
            tmp, jobs, unrelated,
            lambda clock: patch.setattr(time, "clock_gettime_ns", clock)) as node:
        io = one_tick_io(node, tmp)
        calls = calls_per_tick(node)
        return node, io, calls, needed(node)


def io_problems(io: IoCount, need: IoCount) -> list[str]:
    """Each way ``io`` differs from ``need``, said (empty: it is exactly what is needed)."""
    problems = []
    for kind in ("reads", "listings", "stats", "cpu_clocks"):
        got, want = getattr(io, kind), getattr(need, kind)
        extra, missing = got - want, want - got
        if extra:
            problems.append(f"{kind} beyond what the sensors and jobs need: "
                            f"{sorted(extra.items())[:20]} ({sum(extra.values())} in all)")
        if missing:
            problems.append(f"{kind} expected and not done: {sorted(missing.items())[:20]}")
    return problems


@pytest.mark.parametrize("jobs", JOBS)
def test_a_steady_tick_reads_what_its_sensors_and_jobs_need_and_no_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    """Exactly the files the sensors and the jobs need, each once, whether 10 or 2,000
    processes belong to no job; and the same Python calls either way, within the bound."""
    seen = {}
    for unrelated in UNRELATED:
        node, io, calls, need = tick_counts(tmp_path / f"k{unrelated}", jobs, unrelated,
                                            monkeypatch)
        print(f"{jobs} jobs, {unrelated} unrelated: {sum(io.reads.values())} files read, "
              f"{dict(io.calls)}, {calls:.1f} Python calls a tick")
        assert len(node.tree_jobs) + len(node.cgroup_jobs) == jobs and node.cgroup_jobs
        assert io_problems(io, need) == []
        # Kept descriptors: after the first tick only the RAPL counters are opened by
        # path (the sensor opens each read), each read whole at once (its bytes, then
        # the end of the file).
        assert io.calls["open"] + io.calls["io.open"] == len(ZONES)
        assert io.calls["read"] <= 2 * len(ZONES)
        seen[unrelated] = (Counter(io.calls), calls)
    assert seen[UNRELATED[0]] == seen[UNRELATED[1]]  # not one call more for 2,000 others
    calls = seen[UNRELATED[0]][1]
    assert calls <= CALLS_FIXED + CALLS_PER_JOB * jobs, (
        f"{calls:.1f} Python calls a tick at {jobs} jobs, over the bound "
        f"{CALLS_FIXED} + {CALLS_PER_JOB} x {jobs}: a tick does more per job or per tick "
        "than it did (see the module doc to change the bound on purpose)")


def test_the_call_bounds_catch_doubled_work() -> None:
    """The bounds are tight: twice the per-job work at 50 jobs, or twice the fixed work
    at 10, is over them (figures as measured when they were set)."""
    per_job = (CALLS_SET[50] - CALLS_SET[10]) / (50 - 10)
    fixed = CALLS_SET[10] - 10 * per_job
    for jobs, calls in CALLS_SET.items():
        assert calls <= CALLS_FIXED + CALLS_PER_JOB * jobs
    assert fixed + 2 * per_job * 50 > CALLS_FIXED + CALLS_PER_JOB * 50
    assert 2 * fixed + per_job * 10 > CALLS_FIXED + CALLS_PER_JOB * 10


def test_the_count_sees_a_tick_that_reads_the_other_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: a tick that also scans /proc (as the agent did before children
    files) reads the unrelated processes' files, and the comparison names them."""
    from joulestat.host.proctree import read_all

    with monkeypatch.context() as patch, fake_node(
            tmp_path, 2, 10,
            lambda clock: patch.setattr(time, "clock_gettime_ns", clock)) as node:
        node.step()
        with counting_io(tmp_path) as io:
            node.tick()
            read_all(node.proc.root)
        problems = io_problems(io, needed(node))
    assert any("proc/100000/stat" in problem for problem in problems)
    assert any("listings beyond" in problem and "'proc'" in problem for problem in problems)
