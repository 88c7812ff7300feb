"""The cgroup filesystem readers, and `joulestat run`'s cgroup of its own, on fake v2,
hybrid and v1 trees. (A command placed in a cgroup of the real /sys/fs/cgroup:
tests/system/test_cgroupfs_real.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.host.cgroup_jobs import place
from joulestat.host.cgroups import (
    CgroupFs,
    CgroupRef,
    own_cgroup_path,
    parse_proc_cgroup,
    run_cgroup_path,
)
from tests.fakes.procfs import FakeCgroups

HEX = "a" * 64


def test_layouts_are_found_under_the_root(tmp_path: Path) -> None:
    v2 = CgroupFs(FakeCgroups(tmp_path / "v2", "v2").root)
    assert v2.v2 == tmp_path / "v2" and v2.v1_cpuacct is None
    hybrid = CgroupFs(FakeCgroups(tmp_path / "hy", "hybrid").root)
    assert hybrid.v2 == tmp_path / "hy" / "unified"
    assert hybrid.v1_cpuacct == tmp_path / "hy" / "cpu,cpuacct"
    v1 = CgroupFs(FakeCgroups(tmp_path / "v1", "v1").root)
    assert v1.v2 is None and v1.v1_cpuacct is not None
    assert not CgroupFs(tmp_path / "nothing").available


def test_proc_cgroup_lines_and_refs() -> None:
    text = f"12:name=systemd:/user.slice\n4:cpu,cpuacct:/docker/{HEX}\n0::/init.scope\n"
    assert parse_proc_cgroup(text) == {1: f"/docker/{HEX}", 2: "/init.scope"}
    pod = CgroupRef(2, "/kubepods/podX")
    assert pod.contains(CgroupRef(2, "/kubepods/podX/abc")) and pod.contains(pod)
    assert not pod.contains(CgroupRef(2, "/kubepods/podXY"))
    assert not pod.contains(CgroupRef(1, "/kubepods/podX/abc"))
    assert CgroupRef.from_key(pod.key) == pod


def test_own_cgroup_paths_of_runs_and_discovered_jobs() -> None:
    run = f"/system.slice/docker-{HEX}.scope/joulestat-job-r1/sub"
    assert own_cgroup_path("r1", run) == f"/system.slice/docker-{HEX}.scope/joulestat-job-r1"
    assert own_cgroup_path(f"docker:{HEX[:12]}", run) == f"/system.slice/docker-{HEX}.scope"
    assert own_cgroup_path("someone-else", run) is None
    assert run_cgroup_path("r", run) is None  # a name is matched whole
    uid = "8a1f4c2e-5b3d-4e6f-9a7b-1c2d3e4f5a6b"
    assert own_cgroup_path(f"k8s:{uid}", f"/kubepods/besteffort/pod{uid}/{HEX}") == \
        f"/kubepods/besteffort/pod{uid}"
    assert own_cgroup_path("slurm:77", "/system.slice/slurmstepd.scope/job_77/step_0/user") \
        == "/system.slice/slurmstepd.scope/job_77"


@pytest.mark.parametrize("layout", ["v2", "hybrid", "v1"])
def test_counter_reads_ns_and_notices_a_removed_cgroup(tmp_path: Path, layout: str) -> None:
    fake = FakeCgroups(tmp_path / "cg", layout)
    fs = CgroupFs(fake.root)
    fake.make("/a/b", usage_s=1.5, procs=(7,))
    version = 1 if fake.v1 else 2
    counter = fs.counter(CgroupRef(version, "/a/b"))
    assert counter is not None and counter.read_ns() == 1_500_000_000
    assert counter.populated()
    fake.add("/a/b", 0.25)
    assert counter.read_ns() == 1_750_000_000
    fake.remove("/a/b")
    assert counter.read_ns() is None and not counter.populated()
    assert fs.counter(CgroupRef(version, "/../escape")) is None


def _fake_self(tmp_path: Path, text: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(text)
    return proc


@pytest.mark.parametrize("layout", ["v2", "hybrid", "v1"])
def test_place_makes_the_job_cgroup_below_its_own(tmp_path: Path, layout: str) -> None:
    fake = FakeCgroups(tmp_path / "cg", layout)
    path = "/user.slice/session-1.scope/joulestat-job-job-1"
    if layout == "hybrid":  # v2 preferred: the unified hierarchy has it
        fake.base, fake.layout = fake.root / "unified", "v2"
    fake.make(path)  # a fake tree has no kernel to fill a new cgroup: made beforehand
    proc = _fake_self(tmp_path, fake.proc_line("/user.slice/session-1.scope"))
    placement = place(fake.root, "job-1", proc)
    assert placement.cgroup is not None, placement.reason
    expected = "cgroup v1 cpuacct" if layout == "v1" else "cgroup v2"
    assert placement.cpu_source == f"{expected} {path}"
    directory = placement.cgroup.directory
    placement.cgroup.enter()  # writes "0" to its cgroup.procs, as the child does
    assert (directory / "cgroup.procs").read_text() == "0"
    (directory / "cgroup.procs").unlink()
    for name in ("cpu.stat", "cpuacct.usage", "cgroup.events"):
        (directory / name).unlink(missing_ok=True)
    assert placement.cgroup.release() and not directory.exists()


def test_place_says_why_not_where_the_node_does_not_allow_it(tmp_path: Path) -> None:
    nothing = place(tmp_path / "none", "j", _fake_self(tmp_path, "0::/\n"))
    assert nothing.cgroup is None and "no cgroup CPU counters" in nothing.reason
    assert nothing.cpu_source == "process tree"
    fake = FakeCgroups(tmp_path / "cg", "v2")
    (fake.root / "blocked").write_text("a file where the own cgroup should be")
    proc = tmp_path / "p2"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/blocked\n")
    refused = place(fake.root, "j", proc)
    assert refused.cgroup is None and "cannot make" in refused.reason
