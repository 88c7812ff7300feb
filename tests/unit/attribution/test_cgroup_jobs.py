"""Jobs measured by their own cgroups, on fake cgroup v2, hybrid and v1 trees.

The same guarantees as process trees: 2:1 burners split 2:1, a job registered inside
another job's cgroup takes its processes from it, nothing is counted twice, a job whose
cgroup goes away ends with its last CPU time counted once, and a restart resumes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.attribution.accounting import JobAccounting, TickResult
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.core.tick import Tick, TickEntry
from tests.fakes.procfs import HZ, FakeCgroups, FakeProc

HEX = "3f4e1b2c9d8a7f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291807f6e"
DOCKER_PATH = f"/system.slice/docker-{HEX}.scope"
DOCKER_JOB = f"docker:{HEX[:12]}"
UID = "8a1f4c2e-5b3d-4e6f-9a7b-1c2d3e4f5a6b"
POD_PATH = f"/kubepods/burstable/pod{UID}"


class Node:
    """A fake /proc and cgroup tree with an accounting reading them."""

    def __init__(self, root: Path, layout: str) -> None:
        self.proc = FakeProc(root / "proc")
        self.cgroups = FakeCgroups(root / "sys" / "fs" / "cgroup", layout)
        self.registry = JobRegistry(clock=lambda: 0.5)
        self.devices: dict = {}
        self.accounting = JobAccounting(
            self.registry, self.proc.root, IdleBaselines({("cpu", "node"): 0.0}), "exclude",
            device_processes=lambda: self.devices, sysfs_root=root / "sys")
        self.accounting.start()
        self.t = 0.0

    def process(self, pid: int, path: str, ppid: int = 1, start_s: float = 1000.0) -> None:
        self.proc.add(pid, ppid=ppid, start_s=start_s, cgroup=self.cgroups.proc_line(path))

    def register(self, job_id: str, pids: list[int], registered_boot_s: float = 1000.0):
        job = self.registry.register(job_id.replace(":", "-"), "other", pids, job_id=job_id)
        job.registered_boot_s = registered_boot_s
        return job

    def burn(self, path: str, cpu_s: float) -> None:
        """Processes in ``path`` (some may have exited already) use ``cpu_s``."""
        self.cgroups.add(path, cpu_s)
        self.proc.busy += round(cpu_s * HZ)

    def tick(self, busy_extra_s: float = 0.0) -> TickResult:
        self.proc.busy += round(busy_extra_s * HZ)
        self.proc.write()
        result = self.accounting.on_tick(Tick(self.t, self.t + 1.0, (
            TickEntry("cpu", "node", "model:test", 10.0),)))
        self.t += 1.0
        total = sum(s.energy_j for s in result.shares)
        assert total == pytest.approx(10.0)  # conservation, every tick
        return result


@pytest.fixture(params=["v2", "hybrid", "v1"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Node:
    return Node(tmp_path, request.param)


def cpu(result: TickResult, job_id: str) -> float:
    return result.usage.job_cpu_s.get(job_id, 0.0)


def test_run_jobs_in_their_cgroups_split_2_to_1(node: Node) -> None:
    for pid, name in ((100, "full"), (200, "half")):
        path = f"/user.slice/joulestat-job-{name}"
        node.cgroups.make(path, procs=(pid,))
        node.process(pid, path)
        node.register(name, [pid])
    totals = {"full": 0.0, "half": 0.0}
    for _ in range(5):
        node.burn("/user.slice/joulestat-job-full", 1.0)
        node.burn("/user.slice/joulestat-job-half", 0.5)
        result = node.tick(busy_extra_s=0.5)
        for name in totals:
            totals[name] += sum(s.energy_j for s in result.shares if s.job == name)
    assert totals["full"] / totals["half"] == pytest.approx(2.0)
    assert result.usage.pid_to_job == {}  # no process tree walked: one counter per job
    version = "v1 cpuacct" if node.cgroups.v1 else "v2"
    assert result.usage.job_sources["full"] == f"cgroup {version} /user.slice/joulestat-job-full"


def test_cpu_a_job_cgroup_had_before_registration_is_not_the_jobs(node: Node) -> None:
    node.cgroups.make(DOCKER_PATH, usage_s=100.0, procs=(300,))
    node.process(300, DOCKER_PATH, start_s=500.0)  # long before discovery registered it
    node.register(DOCKER_JOB, [300])
    assert cpu(node.tick(), DOCKER_JOB) == 0.0
    node.burn(DOCKER_PATH, 2.0)
    assert cpu(node.tick(), DOCKER_JOB) == pytest.approx(2.0)


def test_a_job_whose_cgroup_vanishes_ends_with_its_cpu_counted_once(node: Node) -> None:
    node.cgroups.make(DOCKER_PATH, procs=(300,))
    node.process(300, DOCKER_PATH, start_s=500.0)
    job = node.register(DOCKER_JOB, [300])
    node.tick()
    node.burn(DOCKER_PATH, 2.0)
    assert cpu(node.tick(), DOCKER_JOB) == pytest.approx(2.0)
    node.cgroups.remove(DOCKER_PATH)  # the container is removed with its processes
    del node.proc.procs[300]
    result = node.tick()
    assert cpu(result, DOCKER_JOB) == 0.0 and DOCKER_JOB in result.usage.gone
    assert job.ended_s == node.t
    assert DOCKER_JOB not in node.tick().usage.job_cpu_s  # ended: never read again


def test_a_removed_run_cgroup_counts_the_wrapper_total_once(node: Node) -> None:
    path = "/user.slice/joulestat-job-run"
    node.cgroups.make(path, procs=(100,))
    node.process(100, path)
    node.register("run", [100])
    node.burn(path, 1.0)
    assert cpu(node.tick(), "run") == pytest.approx(1.0)
    node.proc.busy += round(0.4 * HZ)  # its last 0.4 s, after the last read
    node.cgroups.remove(path)
    del node.proc.procs[100]
    node.registry.end("run", at_s=node.t + 0.5, cpu_s=1.4)  # the wrapper's wait4() total
    assert cpu(node.tick(), "run") == pytest.approx(0.4)


def test_a_job_whose_processes_exit_lives_while_its_cgroup_holds_others(node: Node) -> None:
    node.cgroups.make(DOCKER_PATH, procs=(300, 301))
    node.process(300, DOCKER_PATH, start_s=500.0)
    node.process(301, DOCKER_PATH, ppid=300, start_s=500.0)
    job = node.register(DOCKER_JOB, [300])  # discovery saw only the first one yet
    node.tick()
    del node.proc.procs[300]
    node.burn(DOCKER_PATH, 1.0)
    assert cpu(node.tick(), DOCKER_JOB) == pytest.approx(1.0)
    if node.cgroups.layout == "v2":
        assert job.ended_s is None  # populated: it has not ended
    node.cgroups.set(DOCKER_PATH, 1.0, procs=())
    node.proc.procs.pop(301)
    node.tick()
    assert job.ended_s is not None


def test_a_job_registered_inside_a_pod_takes_its_processes_from_it(node: Node) -> None:
    container = f"{POD_PATH}/{HEX}"
    node.cgroups.make(POD_PATH)
    node.cgroups.make(container, procs=(400, 401))
    node.process(400, container, start_s=500.0)
    node.process(401, container, ppid=400, start_s=500.0)
    node.register(f"k8s:{UID}", [400, 401])  # discovery: every process of the pod
    node.register("inner", [401], registered_boot_s=1005.0)  # track() in the pod, later
    node.tick()
    for _ in range(3):
        node.proc.run(401, 1.0)  # the inner job's process burns 1 s ...
        node.burn(container, 1.5)  # ... of the 1.5 s the pod's cgroup counts
        node.proc.busy -= round(1.0 * HZ)  # (run() counted that second already)
        result = node.tick()
        assert cpu(result, "inner") == pytest.approx(1.0)
        assert cpu(result, f"k8s:{UID}") == pytest.approx(0.5)


def test_a_run_cgroup_inside_a_container_is_taken_out_of_it(node: Node) -> None:
    inner = f"{DOCKER_PATH}/joulestat-job-run"
    node.cgroups.make(DOCKER_PATH, procs=(300,))
    node.cgroups.make(inner, procs=(310,))
    node.process(300, DOCKER_PATH, start_s=500.0)
    node.process(310, inner)
    node.register(DOCKER_JOB, [300, 310])  # the container's processes, the run's too
    node.register("run", [310])
    node.tick()
    node.burn(inner, 2.0)
    node.burn(DOCKER_PATH, 1.0)
    result = node.tick()
    assert cpu(result, "run") == pytest.approx(2.0)
    assert cpu(result, DOCKER_JOB) == pytest.approx(1.0)


def test_an_unreadable_job_cgroup_falls_back_to_the_process_tree(node: Node) -> None:
    node.process(100, "/user.slice/joulestat-job-run")  # no such cgroup under the root
    node.register("run", [100])
    node.proc.run(100, 1.0)
    result = node.tick()
    assert cpu(result, "run") == pytest.approx(1.0)
    assert result.usage.job_sources["run"] == "process tree"


def test_a_restart_resumes_a_cgroup_job_from_the_checkpoint(node: Node) -> None:
    node.cgroups.make(DOCKER_PATH, procs=(300,))
    node.process(300, DOCKER_PATH, start_s=500.0)
    node.register(DOCKER_JOB, [300])
    node.tick()
    node.burn(DOCKER_PATH, 1.0)
    node.tick()
    state = node.accounting.checkpoint()
    node.burn(DOCKER_PATH, 3.0)  # the gap
    node.accounting = JobAccounting(node.registry, node.proc.root,
                                    IdleBaselines({("cpu", "node"): 0.0}), "exclude",
                                    sysfs_root=node.cgroups.root.parents[1])
    node.accounting.restore(state)
    assert cpu(node.tick(), DOCKER_JOB) == pytest.approx(3.0)


def test_an_accelerator_process_belongs_to_the_job_whose_cgroup_holds_it(node: Node) -> None:
    path = "/user.slice/joulestat-job-run"
    node.cgroups.make(path, procs=(100, 150))
    node.process(100, path)
    node.process(150, path, ppid=100)  # the GPU worker: not registered, not walked
    node.register("run", [100])
    node.devices = {("accelerator", "0"): ({150: 80.0}, {150})}
    use = node.tick().usage.devices[("accelerator", "0")]
    assert use.utilization == {"run": 80.0} and use.holders == ("run",)
