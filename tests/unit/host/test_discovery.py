"""discover() against fake /proc trees written into tmp_path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from joulestat.host import discovery
from joulestat.host.discovery import (
    SCHEDULERS,
    DiscoveredJob,
    discover,
    parse_discover_option,
    sagemaker_job_from_env,
)
from tests.fakes.discovery_proc import SESSION, add_proc

CID = "3f4e1b2c9d8a7f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291807f6e"
CID2 = "b" * 64
UID = "8a1f4c2e-5b3d-4e6f-9a7b-1c2d3e4f5a6b"
ALL = frozenset(SCHEDULERS)


def by_id(jobs: list[DiscoveredJob]) -> dict[str, DiscoveredJob]:
    return {j.job_id: j for j in jobs}


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A mixed node: a two-container pod, a Docker container, a Slurm job, and noise."""
    proc = tmp_path / "proc"
    pod = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    slice_ = f"/kubepods.slice/kubepods-burstable.slice/{pod}"
    add_proc(proc, 1, "0::/init.scope\n")
    add_proc(proc, 2, "0::/\n")  # kernel thread
    add_proc(proc, 100, f"0::{slice_}/cri-containerd-{CID}.scope\n")
    add_proc(proc, 101, f"0::{slice_}/cri-containerd-{CID2}.scope\n")
    add_proc(proc, 200, f"0::/system.slice/docker-{CID2}.scope\n")
    add_proc(proc, 201, f"0::/system.slice/docker-{CID2}.scope\n")
    add_proc(proc, 300, "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n")
    add_proc(proc, 301, "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n")
    add_proc(proc, 400, SESSION)
    (proc / "self").mkdir()  # non-numeric entries are ignored
    (proc / "stat").write_text("cpu 1 2 3 4\n")
    return proc


def test_groups_pids_by_job_and_merges_differing_labels(node: Path) -> None:
    jobs = by_id(discover(node, ALL))
    assert set(jobs) == {f"k8s:{UID}", "docker:bbbbbbbbbbbb", "slurm:77"}
    pod = jobs[f"k8s:{UID}"]
    assert pod == DiscoveredJob(
        job_id=f"k8s:{UID}", name="pod-8a1f4c2e", kind="other", scheduler="k8s",
        labels={"container_id": ",".join(sorted([CID, CID2])), "pod_uid": UID, "qos": "burstable"},
        pids=frozenset({100, 101}),
    )
    container = jobs["docker:bbbbbbbbbbbb"]
    assert (container.name, container.pids) == ("container-bbbbbbbbbbbb", frozenset({200, 201}))
    assert container.labels == {"container_id": CID2, "runtime": "docker"}
    job = jobs["slurm:77"]
    assert (job.name, job.kind, job.pids) == ("slurm-77", "other", frozenset({300, 301}))
    assert job.labels == {"step": "0,batch"}


def test_result_is_sorted_by_job_id(node: Path) -> None:
    ids = [j.job_id for j in discover(node, ALL)]
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        (frozenset({"k8s"}), {f"k8s:{UID}"}),
        (frozenset({"docker"}), {"docker:bbbbbbbbbbbb"}),
        (frozenset({"slurm"}), {"slurm:77"}),
        (frozenset({"docker", "slurm"}), {"docker:bbbbbbbbbbbb", "slurm:77"}),
        (frozenset(), set()),
    ],
)
def test_kinds_filter(node: Path, kinds: frozenset[str], expected: set[str]) -> None:
    assert set(by_id(discover(node, kinds))) == expected


def test_v1_and_hybrid_files(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    add_proc(proc, 10, f"4:memory:/docker/{CID}\n3:cpu,cpuacct:/docker/{CID}\n1:name=systemd:/\n")
    add_proc(proc, 11, "4:memory:/slurm/uid_5/job_9/step_0/task_0\n0::/user.slice\n")
    add_proc(proc, 12, f"4:memory:/kubepods/besteffort/pod{UID}/{CID2}\n0::/\n")
    jobs = by_id(discover(proc, ALL))
    assert jobs["docker:3f4e1b2c9d8a"].pids == frozenset({10})
    assert jobs["slurm:9"].labels == {"step": "0", "uid": "5"}
    assert jobs[f"k8s:{UID}"].labels["qos"] == "besteffort"


def test_vanished_and_unreadable_processes_are_skipped(node: Path) -> None:
    (node / "400" / "cgroup").unlink()  # exited between listdir and read
    (node / "999").mkdir()  # a directory left with nothing inside
    os.symlink(node / "gone", node / "998")  # dangling
    assert {j.job_id for j in discover(node, ALL)} == {
        f"k8s:{UID}", "docker:bbbbbbbbbbbb", "slurm:77"
    }


def test_missing_procfs_root_gives_no_jobs(tmp_path: Path) -> None:
    assert discover(tmp_path / "absent", ALL) == []


def test_slurm_env_fallback_when_cgroup_says_nothing(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    service = "0::/system.slice/slurmd.service\n"
    add_proc(proc, 10, service, {"SLURM_JOB_ID": "123", "SLURM_STEP_ID": "0",
                                 "SLURM_JOB_UID": "1001"})
    add_proc(proc, 11, service, {"SLURM_JOB_ID": "123", "SLURM_STEP_ID": "1"})
    add_proc(proc, 12, service, {"SLURM_JOB_ID": "130", "SLURM_ARRAY_JOB_ID": "128",
                                 "SLURM_ARRAY_TASK_ID": "2"})
    add_proc(proc, 13, service, {"SLURM_JOB_ID": "not-a-number"})
    add_proc(proc, 14, service)
    jobs = by_id(discover(proc, frozenset({"slurm"})))
    assert set(jobs) == {"slurm:123", "slurm:128_2"}
    assert jobs["slurm:123"].pids == frozenset({10, 11})
    assert jobs["slurm:123"].labels == {"step": "0,1", "uid": "1001"}
    assert (jobs["slurm:128_2"].name, jobs["slurm:128_2"].pids) == ("slurm-128_2", frozenset({12}))
    # Not selected: the environment is not even read.
    assert discover(proc, frozenset({"docker", "k8s"})) == []


def test_env_is_read_only_for_processes_no_cgroup_claimed(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []
    real = discovery._read_job_env

    def spy(root: str, pid: int) -> dict[str, str] | None:
        read.append(pid)
        return real(root, pid)

    monkeypatch.setattr(discovery, "_read_job_env", spy)
    discover(node, frozenset({"docker", "k8s", "slurm"}))
    assert sorted(read) == [1, 2, 400]
    read.clear()
    discover(node, frozenset({"docker", "k8s"}))
    assert read == []


def test_unreadable_environ_is_skipped_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    proc = tmp_path / "proc"
    add_proc(proc, 10, SESSION, {"SLURM_JOB_ID": "5"})
    add_proc(proc, 11, SESSION, {"SLURM_JOB_ID": "6"})
    locked = f"{proc}/11/environ"
    real_read = discovery.read_bytes

    def read(path: str) -> bytes:
        if path == locked:  # chmod 000 is no barrier when the tests run as root
            raise PermissionError(13, "Permission denied", path)
        return real_read(path)

    monkeypatch.setattr(discovery, "read_bytes", read)
    with caplog.at_level("WARNING"):
        jobs = discover(proc, frozenset({"slurm"}))
    assert [j.job_id for j in jobs] == ["slurm:5"]
    assert caplog.records == []


def write_resource_config(tmp_path: Path) -> Path:
    path = tmp_path / "resourceconfig.json"
    path.write_text(json.dumps({
        "current_host": "algo-2", "current_instance_type": "ml.g5.2xlarge",
        "current_group_name": "homogeneousCluster", "hosts": ["algo-1", "algo-2"],
    }))
    return path


SM_LABELS = {"current_group_name": "homogeneousCluster", "current_host": "algo-2",
             "current_instance_type": "ml.g5.2xlarge"}


def test_sagemaker_from_environ_inside_the_container(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    env = {"TRAINING_JOB_NAME": "bert-ft-2024", "TRAINING_JOB_ARN": "arn:aws:sagemaker:x"}
    add_proc(proc, 1, "0::/\n", env)
    add_proc(proc, 7, "0::/\n", env)
    add_proc(proc, 8, "0::/\n")
    jobs = discover(proc, frozenset({"sagemaker"}), write_resource_config(tmp_path))
    assert jobs == [DiscoveredJob("sagemaker:bert-ft-2024", "bert-ft-2024", "training",
                                  "sagemaker", SM_LABELS, frozenset({1, 7}))]


def test_sagemaker_container_seen_from_docker_cgroup_is_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    env = {"TRAINING_JOB_NAME": "resnet"}
    for pid in (20, 21, 22):
        add_proc(proc, pid, f"0::/system.slice/docker-{CID}.scope\n", env)
    add_proc(proc, 30, f"0::/system.slice/docker-{CID2}.scope\n")
    (proc / "20" / "environ").unlink()  # unreadable: the next pid of the container decides
    read: list[int] = []
    real = discovery._read_job_env
    monkeypatch.setattr(discovery, "_read_job_env",
                        lambda root, pid: read.append(pid) or real(root, pid))
    jobs = by_id(discover(proc, frozenset({"docker", "sagemaker"}), tmp_path / "absent.json"))
    assert set(jobs) == {"sagemaker:resnet", "docker:bbbbbbbbbbbb"}
    assert jobs["sagemaker:resnet"].pids == frozenset({20, 21, 22})  # 20 too: same container
    assert jobs["sagemaker:resnet"].labels == {}  # resourceconfig.json lives in the container
    assert sorted(read) == [20, 21, 30]
    # Without sagemaker selected the container stays a plain container.
    assert {j.job_id for j in discover(proc, frozenset({"docker"}))} == {
        "docker:3f4e1b2c9d8a", "docker:bbbbbbbbbbbb"
    }


def test_sagemaker_beats_slurm_env_and_kinds_filter_it(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    add_proc(proc, 5, SESSION, {"TRAINING_JOB_NAME": "j", "SLURM_JOB_ID": "3"})
    assert [j.job_id for j in discover(proc, ALL, tmp_path / "none")] == ["sagemaker:j"]
    assert [j.job_id for j in discover(proc, frozenset({"slurm"}))] == ["slurm:3"]


def test_sagemaker_job_from_env(tmp_path: Path) -> None:
    config = write_resource_config(tmp_path)
    job = sagemaker_job_from_env({"TRAINING_JOB_NAME": "llama-sft"}, config)
    assert job == DiscoveredJob("sagemaker:llama-sft", "llama-sft", "training", "sagemaker",
                                SM_LABELS, frozenset())
    assert sagemaker_job_from_env({"SLURM_JOB_ID": "1"}, config) is None
    assert sagemaker_job_from_env({"TRAINING_JOB_NAME": " "}, config) is None


def test_sagemaker_broken_resource_config_warns_and_keeps_the_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "resourceconfig.json"
    bad.write_text("{not json")
    with caplog.at_level("WARNING"):
        job = sagemaker_job_from_env({"TRAINING_JOB_NAME": "x"}, bad)
    assert job is not None and job.labels == {}
    assert "resourceconfig.json" in caplog.text
    bad.write_text("[1, 2]")
    job = sagemaker_job_from_env({"TRAINING_JOB_NAME": "x"}, bad)
    assert job is not None and job.labels == {}


def test_discover_rejects_unknown_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nomad"):
        discover(tmp_path, frozenset({"nomad"}))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", frozenset()),
        ("docker", frozenset({"docker"})),
        ("docker,k8s,slurm,sagemaker", ALL),
        (" K8s , slurm ,", frozenset({"k8s", "slurm"})),
    ],
)
def test_parse_discover_option(text: str, expected: frozenset[str]) -> None:
    assert parse_discover_option(text) == expected


def test_parse_discover_option_names_the_unknown_word_and_the_valid_ones() -> None:
    with pytest.raises(ValueError) as err:
        parse_discover_option("docker,kubernetes")
    message = str(err.value)
    assert "'kubernetes'" in message
    assert "docker, k8s, slurm, sagemaker" in message


def test_sync_registry_registers_updates_and_ends_discovered_jobs(node: Path) -> None:
    import shutil

    from joulestat.attribution.discovered import sync_registry
    from joulestat.attribution.registry import JobRegistry

    registry = JobRegistry()
    manual = registry.register("by-hand", "training", pids=[400])
    sync_registry(registry, node, ALL)
    jobs = {j.id: j for j in registry.jobs(running_only=True)}
    assert jobs["slurm:77"].pids == {300, 301}
    assert jobs["slurm:77"].origin == "discovered:slurm"
    assert {j.origin for j in jobs.values()} >= {"discovered:k8s", "discovered:docker"}
    shutil.rmtree(node / "301")  # a step finished
    sync_registry(registry, node, ALL)
    assert registry.get("slurm:77").pids == {300}
    shutil.rmtree(node / "300")  # the whole Slurm job is gone
    sync_registry(registry, node, ALL)
    assert registry.get("slurm:77").status == "ended"
    assert registry.get(manual.id).status == "running"  # never ends what it did not find


def test_a_scan_cache_reads_only_processes_new_since_the_last_scan(node: Path) -> None:
    from joulestat.host.discovery import ScanCache

    now = [0.0]
    cache = ScanCache(revalidate_every_s=60.0, clock=lambda: now[0])
    first = discover(node, ALL, cache=cache)
    read_first = cache.misses
    assert read_first == 9  # every process, once
    assert discover(node, ALL, cache=cache) == first
    assert cache.misses == read_first  # nothing new: nothing read
    add_proc(node, 500, f"0::/system.slice/docker-{CID}.scope\n")
    found = by_id(discover(node, ALL, cache=cache))
    assert cache.misses == read_first + 1
    assert found[f"docker:{CID[:12]}"].pids == frozenset({500})
    now[0] = 61.0  # once a minute every process is read again
    discover(node, ALL, cache=cache)
    assert cache.misses == read_first + 1 + 10  # the ten processes now there
