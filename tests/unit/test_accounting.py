"""Job accounting on a fake /proc: one process belongs to one job, however jobs nest."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.idle import IdleBaselines
from agent.jobs import proctree
from agent.jobs.accounting import JobAccounting
from agent.jobs.registry import JobRegistry
from agent.tick import Tick, TickEntry

HZ = proctree.CLOCK_TICKS_PER_S


class FakeProc:
    """A /proc with a node-wide busy counter and processes whose CPU time we set."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.busy = 0
        self.procs: dict[int, tuple[int, int, int]] = {}  # pid -> (ppid, cpu ticks, start)
        self.write()

    def write(self) -> None:
        (self.root / "stat").write_text(f"cpu  {self.busy} 0 0 100000 0 0 0 0 0 0\n"
                                        f"cpu0 {self.busy} 0 0 100000 0 0 0 0 0 0\n")
        for path in self.root.iterdir():
            if path.name.isdigit() and int(path.name) not in self.procs:
                (path / "stat").unlink()
                path.rmdir()
        for pid, (ppid, ticks, start) in self.procs.items():
            (self.root / str(pid)).mkdir(exist_ok=True)
            fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 4
            fields += [str(start), "0"]
            (self.root / str(pid) / "stat").write_text(f"{pid} (p {pid}) {' '.join(fields)}\n")

    def run(self, pid: int, cpu_s: float, busy_extra_s: float = 0.0) -> None:
        ppid, ticks, start = self.procs[pid]
        self.procs[pid] = (ppid, ticks + round(cpu_s * HZ), start)
        self.busy += round((cpu_s + busy_extra_s) * HZ)


def _tick(t0: float, t1: float) -> Tick:
    return Tick(t0, t1, (TickEntry("cpu", "node", "model:test", 10.0 * (t1 - t0)),))


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path)


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
    proc.procs = {100: (1, 0, 1000 * HZ)}  # started at 1000 s after boot
    proc.write()
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = JobAccounting(registry, proc.root, IdleBaselines({("cpu", "node"): 0.0}),
                               "exclude")
    accounting.start()
    outer = registry.register("run", "training", [100], job_id="outer")
    outer.registered_boot_s = 1000.0  # `joulestat run` registers what it just started
    proc.run(100, 2.0, busy_extra_s=2.0)  # the job uses half the node's busy time
    proc.write()
    first = accounting.on_tick(_tick(0.0, 1.0))
    registry.register("track", "training", [100], job_id="inner").registered_boot_s = 1001.5
    proc.run(100, 3.0, busy_extra_s=3.0)
    proc.write()
    second = accounting.on_tick(_tick(1.0, 2.0))

    def job_j(result, job_id):
        return sum(s.energy_j for s in result.shares if s.job == job_id)

    assert job_j(first, "outer") == pytest.approx(5.0)  # half of 10 J
    # After the second registration the process is the inner job's alone: it gets the
    # process's busy share (half of the node) and the outer job gets nothing.
    assert job_j(second, "inner") == pytest.approx(5.0)
    assert job_j(second, "outer") == pytest.approx(0.0)
    assert outer.ended_s is None  # its process lives on: it has not ended


def test_a_process_moving_jobs_takes_only_its_new_cpu_along(proc: FakeProc) -> None:
    """A child job registered on a process that already ran 5 s under its parent: the
    child's first tick counts the CPU since the last tick, not the process's lifetime."""
    proc.procs = {100: (1, 0, 1000 * HZ), 101: (100, 0, 1000 * HZ)}
    proc.write()
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = JobAccounting(registry, proc.root, IdleBaselines({("cpu", "node"): 0.0}),
                               "exclude")
    accounting.start()
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
    assert result.finished_jobs == []


def test_finished_jobs_are_those_whose_end_the_tick_covers(proc: FakeProc) -> None:
    registry = JobRegistry(clock=lambda: 1.5)
    accounting = JobAccounting(registry, proc.root, IdleBaselines({("cpu", "node"): 0.0}))
    accounting.start()
    job = registry.register("a", "other", job_id="a")
    registry.end("a", at_s=2.5)
    assert accounting.on_tick(_tick(1.0, 2.0)).finished_jobs == []
    assert accounting.on_tick(_tick(2.0, 3.0)).finished_jobs == [job]
