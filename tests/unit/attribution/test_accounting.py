"""Job accounting on a fake /proc: one process belongs to one job, however jobs nest.

Every test on process trees runs twice: with ``task/<tid>/children`` files (trees walked
from the registered processes, no scan) and without (a kernel without
``CONFIG_PROC_CHILDREN``: new processes found by a rate-limited scan).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.attribution.accounting import JobAccounting, TickResult
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.tick import Tick, TickEntry
from joulestat.host import proctree
from joulestat.host.usage import SCAN_EVERY_S
from tests.fakes.procfs import HZ, FakeProc

NODE_W = 10.0


def _tick(t0: float, t1: float) -> Tick:
    return Tick(t0, t1, (TickEntry("cpu", "node", "model:test", NODE_W * (t1 - t0)),))


def job_j(result: TickResult, job_id: str) -> float:
    return sum(s.energy_j for s in result.shares if s.job == job_id)


class Clock:
    """A monotonic clock the test moves (for the scan's rate limit)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture(params=["children", "scan"])
def proc(request: pytest.FixtureRequest, tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc", children_files=request.param == "children")


def _accounting(proc: FakeProc, registry: JobRegistry, policy: str = "exclude",
                clock: Clock | None = None, idle_w: float = 0.0) -> JobAccounting:
    accounting = JobAccounting(registry, proc.root, IdleBaselines({("cpu", "node"): idle_w}),
                               policy)
    if clock is not None:
        accounting.host._clock = clock
    accounting.start()
    return accounting


def _one_job(proc: FakeProc, kind: str = "training", boot_s: float | None = 1000.0, *,
             child: bool = False, clock: Clock | None = None
             ) -> tuple[JobRegistry, JobAccounting, Job]:
    """pid 100 (with its child 101 where asked), started 1000 s after boot; accounting
    started over them, then job "job" registered on pid 100 (at ``boot_s``, when given)."""
    proc.add(100, start_s=1000)
    if child:
        proc.add(101, ppid=100, start_s=1000)
    proc.write()
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = _accounting(proc, registry, clock=clock)
    job = registry.register("job", kind, [100], job_id="job")
    if boot_s is not None:
        job.registered_boot_s = boot_s
    return registry, accounting, job


def test_exclusive_trees_nearest_registered_ancestor_wins() -> None:
    stat = proctree.ProcStat
    procs = {p: stat(p, pp, 0, 0) for p, pp in ((10, 1), (11, 10), (12, 11), (13, 12), (20, 1))}
    trees = proctree.exclusive_trees([("outer", [10]), ("inner", [12]), ("other", [20])], procs)
    assert trees == {"outer": {10, 11}, "inner": {12, 13}, "other": {20}}
    # One pid registered by two jobs: the later registration owns it and its children.
    trees = proctree.exclusive_trees([("a", [10]), ("b", [10])], procs)
    assert trees == {"a": set(), "b": {10, 11, 12, 13}}


def test_two_jobs_over_one_process_never_count_its_cpu_twice(proc: FakeProc) -> None:
    """The defect: track() inside `joulestat run` with its own id made two jobs over one
    process, each with the whole process's CPU time; now the later one owns it."""
    proc.add(100, start_s=1000)  # started at 1000 s after boot
    proc.write()
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = _accounting(proc, registry)
    outer = registry.register("run", "training", [100], job_id="outer")
    outer.registered_boot_s = 1000.0  # `joulestat run` registers what it just started
    proc.run(100, 2.0, busy_extra_s=2.0)  # the job uses half the node's busy time
    proc.write()
    first = accounting.on_tick(_tick(0.0, 1.0))
    registry.register("track", "training", [100], job_id="inner").registered_boot_s = 1001.5
    proc.run(100, 3.0, busy_extra_s=3.0)
    proc.write()
    second = accounting.on_tick(_tick(1.0, 2.0))

    assert job_j(first, "outer") == pytest.approx(5.0)  # half of 10 J
    # After the second registration the process is the inner job's alone: it gets the
    # process's busy share (half of the node) and the outer job gets nothing.
    assert job_j(second, "inner") == pytest.approx(5.0)
    assert job_j(second, "outer") == pytest.approx(0.0)
    assert outer.ended_s is None  # its process lives on: it has not ended


def test_a_process_moving_jobs_takes_only_its_new_cpu_along(proc: FakeProc) -> None:
    """A child job registered on a process that already ran 5 s under its parent: the
    child's first tick counts the CPU since the last tick, not the process's lifetime."""
    proc.add(100, start_s=1000)
    proc.add(101, ppid=100, start_s=1000)
    proc.write()
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = _accounting(proc, registry)
    registry.register("parent", "training", [100], job_id="parent").registered_boot_s = 1000.0
    proc.run(101, 5.0)
    proc.write()
    accounting.on_tick(_tick(0.0, 1.0))
    # Registered long after the process started (its start is before the cutoff).
    registry.register("child", "training", [101], job_id="child").registered_boot_s = 1005.0
    proc.run(101, 1.0)
    proc.run(100, 1.0)
    proc.write()
    result = accounting.on_tick(_tick(1.0, 2.0))
    shares = {s.job: s.energy_j for s in result.shares}
    assert shares["child"] == pytest.approx(5.0)  # 1 s of 2 s busy
    assert shares["parent"] == pytest.approx(5.0)
    assert result.finished_ids == []


def test_finished_jobs_are_those_whose_end_the_tick_covers(proc: FakeProc) -> None:
    registry = JobRegistry(clock=lambda: 1.5)
    accounting = JobAccounting(registry, proc.root, IdleBaselines({("cpu", "node"): 0.0}))
    accounting.start()
    registry.register("a", "other", job_id="a")
    registry.end("a", at_s=2.5)
    assert accounting.on_tick(_tick(1.0, 2.0)).finished_ids == []
    assert accounting.on_tick(_tick(2.0, 3.0)).finished_ids == ["a"]


def test_two_burners_get_dynamic_cpu_in_ratio_2_to_1(proc: FakeProc) -> None:
    proc.add(100, start_s=1000)
    proc.add(200, start_s=1000)
    proc.write()
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = _accounting(proc, registry)
    for job_id, pid in (("full", 100), ("half", 200)):
        registry.register(job_id, "training", [pid], job_id=job_id).registered_boot_s = 1000.0
    totals = {"full": 0.0, "half": 0.0}
    for i in range(10):
        proc.run(100, 1.0)
        proc.run(200, 0.5, busy_extra_s=0.5)  # someone else uses the node too
        proc.write()
        result = accounting.on_tick(_tick(float(i), i + 1.0))
        for job_id in totals:
            totals[job_id] += job_j(result, job_id)
        assert sum(s.energy_j for s in result.shares) == pytest.approx(NODE_W)
    assert totals["full"] / totals["half"] == pytest.approx(2.0)
    assert totals["full"] == pytest.approx(10 * NODE_W / 2)


def test_a_grandchild_started_after_registration_counts_from_its_start(
        proc: FakeProc) -> None:
    clock = Clock()
    _, accounting, _ = _one_job(proc, clock=clock)
    accounting.on_tick(_tick(0.0, 1.0))
    proc.add(101, ppid=100, start_s=1001)
    proc.add(102, ppid=101, start_s=1001)  # a grandchild, born after registration
    counted = 0.0
    for i in range(1, 9):
        proc.run(102, 1.0, busy_extra_s=1.0)
        proc.write()
        clock.now_s = float(i)
        result = accounting.on_tick(_tick(float(i), i + 1.0))
        counted += result.usage.job_cpu_s["job"]
    assert counted == pytest.approx(8.0)  # every second of it, once
    if proc.children_files:
        assert accounting.host.scans == 0  # found through children files alone
    else:
        assert accounting.host.scans == 1 + 8 // SCAN_EVERY_S  # no more than every 5 s


def test_a_child_exit_hands_its_time_to_the_parent_once(proc: FakeProc) -> None:
    _, accounting, _ = _one_job(proc, child=True)
    counted = []
    for i, step in enumerate(("run", "run", "exit", "run")):
        if step == "run":
            proc.run(101 if 101 in proc.procs else 100, 1.0)
        else:
            proc.run(101, 0.5)  # its last half second, then the parent reaps it
            proc.exit(101)
        proc.write()
        counted.append(accounting.on_tick(_tick(float(i), i + 1.0)).usage.job_cpu_s["job"])
    assert counted == pytest.approx([1.0, 1.0, 0.5, 1.0])


def test_a_job_whose_processes_all_exit_ends_with_its_last_cpu_once(proc: FakeProc) -> None:
    registry, accounting, job = _one_job(proc)
    proc.run(100, 1.0)
    proc.write()
    assert accounting.on_tick(_tick(0.0, 1.0)).usage.job_cpu_s["job"] == pytest.approx(1.0)
    proc.run(100, 0.3)  # used after the last read, seen only by the wrapper's wait4()
    proc.exit(100, reaped_by_parent=False)
    proc.write()
    registry.end("job", at_s=1.5, cpu_s=1.3)  # as `joulestat run` ends it
    result = accounting.on_tick(_tick(1.0, 2.0))
    assert result.usage.job_cpu_s["job"] == pytest.approx(0.3)
    assert job.ended_s is not None and result.finished_ids == [job.id]

    proc.add(200, start_s=1000)  # an API job whose process just goes away
    proc.write()
    api = registry.register("api", "inference", [200], job_id="api")
    accounting.on_tick(_tick(2.0, 3.0))
    proc.exit(200, reaped_by_parent=False)
    proc.write()
    result = accounting.on_tick(_tick(3.0, 4.0))
    assert api.ended_s == 4.0 and "api" in result.usage.gone


def test_a_recycled_pid_is_not_the_registered_process(proc: FakeProc) -> None:
    _, accounting, job = _one_job(proc, "other", boot_s=None)
    accounting.on_tick(_tick(0.0, 1.0))
    proc.exit(100, reaped_by_parent=False)
    proc.add(100, start_s=1500, cpu_s=50.0)  # another process, same pid
    proc.write()
    result = accounting.on_tick(_tick(1.0, 2.0))
    assert result.usage.job_cpu_s["job"] == 0.0
    assert job.ended_s == 2.0


def test_steady_state_reads_no_unrelated_process(proc: FakeProc) -> None:
    """2,000 processes that belong to no job: with children files none is ever read."""
    for pid in range(1000, 3000):
        proc.add(pid, start_s=900)
    proc.add(100, start_s=1000)
    proc.add(101, ppid=100, start_s=1000)
    proc.write()
    proc.watch = {100, 101}  # rewrite only these from now on
    registry = JobRegistry(clock=lambda: 0.5)
    clock = Clock()
    accounting = _accounting(proc, registry, clock=clock)
    registry.register("job", "other", [100], job_id="job")
    for i in range(20):
        clock.now_s = i * 0.5
        proc.run(101, 0.1)
        proc.write()
        result = accounting.on_tick(_tick(i * 0.5, (i + 1) * 0.5))
        assert set(result.usage.pid_to_job) == {100, 101}
    assert accounting.host.scans == (0 if proc.children_files else 2)


def test_conservation_on_every_tick_with_many_jobs(proc: FakeProc) -> None:
    registry = JobRegistry(clock=lambda: 0.5)
    for i in range(20):
        proc.add(100 + i, start_s=1000)
    proc.write()
    accounting = _accounting(proc, registry, policy="share", idle_w=4.0)
    for i in range(20):
        # Registered after its process started (at 1000 s after boot), whatever this
        # machine's own uptime: its CPU before registration is not counted.
        job = registry.register(f"j{i}", "other", [100 + i], job_id=f"j{i}")
        job.registered_boot_s = 1001.5
    for t in range(5):
        for i in range(0, 20, 3):
            proc.run(100 + i, 0.05 * (i + 1), busy_extra_s=0.1)
        proc.write()
        tick = _tick(float(t), t + 1.0)
        result = accounting.on_tick(tick)
        assert sum(s.energy_j for s in result.shares) == pytest.approx(tick.entries[0].energy_j)
        # Idle follows the dynamic shares; on the first tick (CPU before registration
        # not counted) nobody is busy, so all twenty share it evenly.
        busy = {f"j{i}" for i in range(0, 20, 3) if t > 0} or {f"j{i}" for i in range(20)}
        assert {s.job for s in result.shares if s.job is not None} == busy


def test_checkpoint_restores_the_gap_and_reads_the_older_clock_tick_form(
        proc: FakeProc) -> None:
    registry, first, _ = _one_job(proc, "other")
    proc.run(100, 2.0)
    proc.write()
    first.on_tick(_tick(0.0, 1.0))
    state = first.checkpoint()
    assert state["cpu_ns"] == {"job": 2 * 10**9}
    old_form = {"busy_ticks": state["busy_ticks"], "cpu_ticks": {"job": 2 * HZ},
                "owners": {"100": ["job", 2 * HZ, 1000 * HZ]}, "idle": state["idle"]}
    proc.run(100, 3.0)  # during the gap: nobody measures
    proc.write()
    for saved in (state, old_form):
        second = JobAccounting(registry, proc.root, IdleBaselines({("cpu", "node"): 0.0}))
        second.restore(saved)
        assert second.on_tick(_tick(1.0, 5.0)).usage.job_cpu_s["job"] == pytest.approx(3.0)
        second.close()


def test_exporters_get_a_whole_snapshot_not_live_jobs(proc: FakeProc) -> None:
    _, accounting, _ = _one_job(proc, "other")
    proc.run(100, 1.0)
    proc.write()
    result = accounting.on_tick(_tick(0.0, 1.0))
    snapshot = accounting.snapshot()
    assert snapshot.t1_s == 1.0 and snapshot.usage is result.usage
    assert snapshot.jobs["job"].energy_j == {"cpu": pytest.approx(NODE_W)}
    proc.run(100, 1.0)
    proc.write()
    accounting.on_tick(_tick(1.0, 2.0))
    assert snapshot.jobs["job"].energy_j == {"cpu": pytest.approx(NODE_W)}  # unchanged
    assert accounting.snapshot().jobs["job"].energy_j == {"cpu": pytest.approx(2 * NODE_W)}
