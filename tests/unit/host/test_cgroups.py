"""classify_cgroup against /proc/<pid>/cgroup texts in every shape the schedulers write."""

from __future__ import annotations

import pytest

from joulestat.host.cgroups import CgroupIdentity, classify_cgroup, classify_path

CID = "3f4e1b2c9d8a7f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291807f6e"
CID2 = "a" * 64
UID = "8a1f4c2e-5b3d-4e6f-9a7b-1c2d3e4f5a6b"
UID_ = UID.replace("-", "_")


def v1(path: str, systemd: str = "/") -> str:
    """A cgroup v1 file: every controller at ``path``, the named systemd hierarchy apart."""
    controllers = ["pids", "blkio", "freezer", "devices", "memory", "cpuset", "cpu,cpuacct"]
    lines = [f"12:name=systemd:{systemd}"]
    lines += [f"{11 - i}:{c}:{path}" for i, c in enumerate(controllers)]
    return "\n".join(lines) + "\n"


def v2(path: str) -> str:
    return f"0::{path}\n"


def hybrid(v1_path: str, unified: str) -> str:
    return v1(v1_path) + f"0::{unified}\n"


def k8s(qos: str, container: str | None = CID) -> CgroupIdentity:
    labels = {"pod_uid": UID, "qos": qos}
    if container:
        labels["container_id"] = container
    return CgroupIdentity("k8s", f"k8s:{UID}", "pod-8a1f4c2e", labels)


# --- Kubernetes -------------------------------------------------------------------------


@pytest.mark.parametrize("qos", ["burstable", "besteffort"])
def test_k8s_cgroupfs_driver_v1(qos: str) -> None:
    assert classify_cgroup(v1(f"/kubepods/{qos}/pod{UID}/{CID}")) == k8s(qos)


def test_k8s_cgroupfs_guaranteed_on_v2() -> None:
    assert classify_cgroup(v2(f"/kubepods/pod{UID}/{CID}")) == k8s("guaranteed")


@pytest.mark.parametrize("runtime", ["cri-containerd", "crio", "docker"])
def test_k8s_systemd_driver_burstable(runtime: str) -> None:
    path = (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/{runtime}-{CID}.scope"
    )
    assert classify_cgroup(v2(path)) == k8s("burstable")


def test_k8s_systemd_driver_besteffort_on_v1() -> None:
    path = (
        "/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope"
    )
    assert classify_cgroup(v1(path, systemd=path)) == k8s("besteffort")


def test_k8s_systemd_driver_guaranteed() -> None:
    path = f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope"
    found = classify_cgroup(v2(path))
    assert found == k8s("guaranteed")
    assert found is not None and found.labels["pod_uid"] == UID  # dashes restored


def test_k8s_process_in_pod_cgroup_without_container() -> None:
    assert classify_path(f"/kubepods/burstable/pod{UID}") == k8s("burstable", container=None)


def test_k8s_static_pod_hash_uid() -> None:
    uid = "6f1d0c3e9b8a7f6e5d4c3b2a19087f6e"
    found = classify_path(f"/kubepods/burstable/pod{uid}/{CID}")
    assert found is not None
    assert (found.job_id, found.name) == (f"k8s:{uid}", "pod-6f1d0c3e")


def test_kind_node_container_pod_wins() -> None:
    # kind: the kubelet runs inside a Docker container and prefixes its slices.
    path = (
        f"/system.slice/docker-{CID2}.scope/kubelet.slice/kubelet-kubepods.slice/"
        f"kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope"
    )
    assert classify_cgroup(v2(path)) == k8s("besteffort")


def test_docker_nested_in_pod_pod_wins() -> None:
    path = f"/kubepods/besteffort/pod{UID}/{CID}/docker/{CID2}"
    assert classify_cgroup(v2(path)) == k8s("besteffort")


def test_pod_wins_over_docker_on_another_v1_line() -> None:
    text = f"4:memory:/docker/{CID2}\n3:cpu,cpuacct:/kubepods/pod{UID}/{CID}\n"
    assert classify_cgroup(text) == k8s("guaranteed")


def test_reader_in_other_cgroup_namespace_sees_dotdot_prefix() -> None:
    path = f"/../../kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"
    assert classify_cgroup(v2(path)) == k8s("guaranteed")


# --- Docker and Podman ------------------------------------------------------------------


def docker(runtime: str = "docker", cid: str = CID) -> CgroupIdentity:
    return CgroupIdentity(
        "docker", f"docker:{cid[:12]}", f"container-{cid[:12]}",
        {"container_id": cid, "runtime": runtime},
    )


def test_docker_v1() -> None:
    assert classify_cgroup(v1(f"/docker/{CID}", systemd=f"/docker/{CID}")) == docker()
    assert docker().job_id == "docker:3f4e1b2c9d8a"


def test_docker_v2_systemd_driver() -> None:
    assert classify_cgroup(v2(f"/system.slice/docker-{CID}.scope")) == docker()


def test_docker_hybrid_v1_controllers_with_unified_line() -> None:
    assert classify_cgroup(hybrid(f"/docker/{CID}", "/")) == docker()


@pytest.mark.parametrize(
    "path",
    [f"/machine.slice/libpod-{CID}.scope", f"/machine.slice/libpod-{CID}.scope/container",
     f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope",
     f"/libpod_parent/libpod-{CID}"],
)
def test_podman(path: str) -> None:
    assert classify_cgroup(v2(path)) == docker("podman")


def test_podman_conmon_is_not_the_container() -> None:
    assert classify_cgroup(v2(f"/machine.slice/libpod-conmon-{CID}.scope")) is None


def test_docker_in_docker_outermost_wins() -> None:
    assert classify_cgroup(v1(f"/docker/{CID}/docker/{CID2}")) == docker()


def test_dockerd_itself_and_short_ids_are_not_containers() -> None:
    assert classify_cgroup(v2("/system.slice/docker.service")) is None
    assert classify_cgroup(v2("/docker/3f4e1b2c9d8a")) is None
    assert classify_cgroup(v2(f"/docker/{CID.upper()}")) is None


# --- Slurm ------------------------------------------------------------------------------


def slurm(job: str, **labels: str) -> CgroupIdentity:
    return CgroupIdentity("slurm", f"slurm:{job}", f"slurm-{job}", labels)


@pytest.mark.parametrize("step", ["0", "12", "batch", "extern", "interactive"])
def test_slurm_v2_steps(step: str) -> None:
    path = f"/system.slice/slurmstepd.scope/job_4242/step_{step}/user/task_0"
    assert classify_cgroup(v2(path)) == slurm("4242", step=step)


def test_slurm_v2_multiple_slurmd_nodename_scope() -> None:
    path = "/system.slice/node07_slurmstepd.scope/job_17/step_batch/user/task_special"
    assert classify_cgroup(v2(path)) == slurm("17", step="batch")


def test_slurm_v2_job_level_process_has_no_step() -> None:
    assert classify_cgroup(v2("/system.slice/slurmstepd.scope/job_17")) == slurm("17")


def test_slurmstepd_own_system_cgroup_is_no_job() -> None:
    assert classify_cgroup(v2("/system.slice/slurmstepd.scope/system")) is None
    assert classify_cgroup(v2("/system.slice/slurmd.service")) is None


def test_slurm_v1() -> None:
    path = "/slurm/uid_1001/job_99/step_0/task_3"
    text = v1(path, systemd="/system.slice/slurmd.service")
    assert classify_cgroup(text) == slurm("99", uid="1001", step="0")


def test_slurm_v1_multiple_slurmd_root_and_batch_step() -> None:
    path = "/slurm_node07/uid_0/job_5/step_batch/task_0"
    assert classify_cgroup(v1(path)) == slurm("5", uid="0", step="batch")


def test_slurm_v1_needs_uid_and_job_segments() -> None:
    assert classify_cgroup(v1("/slurm/job_5/step_0")) is None
    assert classify_cgroup(v1("/slurm/uid_5")) is None


def test_slurm_hybrid_unified_line_says_session() -> None:
    text = hybrid("/slurm/uid_1001/job_99/step_0/task_0", "/user.slice/user-1001.slice")
    assert classify_cgroup(text) == slurm("99", uid="1001", step="0")


def test_slurm_job_inside_container_is_the_slurm_job() -> None:
    path = f"/docker/{CID}/system.slice/slurmstepd.scope/job_8/step_0/user/task_0"
    assert classify_cgroup(v2(path)) == slurm("8", step="0")


# --- not jobs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        v2("/user.slice/user-1000.slice/session-3.scope"),
        v2("/system.slice/sshd.service"),
        v2("/init.scope"),
        v2("/"),  # inside a container with its own cgroup namespace, or a kernel thread
        v1("/", systemd="/user.slice/user-1000.slice/session-2.scope"),
        hybrid("/", "/"),
        "",
        "garbage without colons\n",
        v2("/kubepods/burstable"),
        v2("/kubepods.slice/kubepods-burstable.slice"),
    ],
)
def test_not_a_job(text: str) -> None:
    assert classify_cgroup(text) is None
