"""Which job a process belongs to, read from the text of ``/proc/<pid>/cgroup``.

Schedulers put every job in its own cgroup and encode the job's identity in the cgroup's
path, so one small file per process says which pod, container or Slurm job it belongs
to, with no API call and no privileges (the file is world-readable). This module only
parses that text; :mod:`joulestat.attribution.discovery` reads the files.

The file has one ``hierarchy-id:controllers:path`` line per hierarchy: many lines on
cgroup v1, a single ``0::/path`` on v2, both on hybrid hosts. Every path is classified
and the most specific answer wins, so a v1 host whose ``name=systemd`` line says
``/user.slice`` but whose ``cpu`` line says ``/kubepods/...`` still yields the pod.

Path shapes recognised (segment by segment, anywhere in the path, so prefixes such as
kind's ``/system.slice/docker-<id>.scope/kubelet.slice/...`` or the ``/../..`` that a
reader in another cgroup namespace sees do not hide a job):

- Kubernetes, cgroupfs driver: ``kubepods[/burstable|/besteffort]/pod<uid>[/<container>]``.
- Kubernetes, systemd driver: ``kubepods[-<qos>]-pod<uid with _ for ->.slice[/<container>]``
  where ``<container>`` is ``cri-containerd-<64hex>.scope``, ``crio-<64hex>.scope``,
  ``docker-<64hex>.scope`` or a bare ``<64hex>``.
- Slurm v2: ``[<nodename>_]slurmstepd.scope/job_<id>[/step_<step>]``.
- Slurm v1: ``slurm[_<nodename>]/uid_<uid>/job_<id>[/step_<step>]``.
- Docker: ``docker/<64hex>`` (v1, or cgroupfs driver), ``docker-<64hex>.scope`` (systemd
  driver); Podman: ``libpod-<64hex>[.scope]`` (its ``libpod-conmon-`` monitor is not the
  container and is not matched).

Precedence when a path (or a file) matches several shapes: Kubernetes, then Slurm, then
Docker. A pod is what the user scheduled, even when its containers run under Docker or
the kubelet itself runs in a container (kind); a Slurm job started inside a container is
still the Slurm job. Among nested plain containers the outermost wins: that is the one
the host's ``docker ps`` lists.

A process inside a container with its own cgroup namespace sees ``0::/`` and cannot tell
which job it is in from this file: that is ``None``, as are user sessions and services.

Each answer also carries the job's own cgroup (``cgroup_path``: the path cut after the
pod, Slurm job or container segment), whose CPU counter
:mod:`joulestat.host.cgroup_units` reads instead of walking the job's processes. Cgroups that
``joulestat run`` makes for its command are named ``joulestat-job-<job id>``
(:mod:`joulestat.host.job_cgroup`); :func:`own_cgroup_path` knows both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from joulestat.host.job_cgroup import run_cgroup_path

__all__ = ["CgroupIdentity", "classify_cgroup", "classify_path", "own_cgroup_path"]

_HEX64 = r"[0-9a-f]{64}"

# Kubernetes pod UIDs are UUIDs (with '-'; the systemd driver writes '_' instead). Static
# (mirror) pods use a 32-hex hash with no dashes, which the same character class accepts.
_K8S_POD_CGROUPFS = re.compile(r"pod([0-9a-f][0-9a-f-]*)")
_K8S_POD_SYSTEMD = re.compile(
    r"(?:.*-)?kubepods(?:-(burstable|besteffort))?-pod([0-9a-f_]+)\.slice"
)
_K8S_CONTAINER = re.compile(rf"(?:(?:cri-containerd|crio|docker)-)?({_HEX64})(?:\.scope)?")
_K8S_QOS_CGROUPFS = frozenset({"burstable", "besteffort"})

_SLURM_V2_SCOPE = re.compile(r"(?:.+_)?slurmstepd\.scope")
_SLURM_V1_ROOT = re.compile(r"slurm(?:_.+)?")
_SLURM_UID = re.compile(r"uid_(\d+)")
_SLURM_JOB = re.compile(r"job_(\d+)")
_SLURM_STEP = re.compile(r"step_(\w+)")

_DOCKER_HEX = re.compile(_HEX64)
_DOCKER_SCOPE = re.compile(rf"docker-({_HEX64})\.scope")
_PODMAN = re.compile(rf"libpod-({_HEX64})(?:\.scope)?")

_PRIORITY = {"k8s": 0, "slurm": 1, "docker": 2}
# Every shape above contains one of these words; a file with none is skipped unparsed.
_MARKERS = ("kubepods", "slurm", "docker", "libpod")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """The job a cgroup path names.

    ``scheduler`` is ``"k8s"``, ``"slurm"`` or ``"docker"`` (Podman containers included,
    told apart by ``labels["runtime"]``). ``job_id`` is unique across schedulers on a
    node (``k8s:<pod uid>``, ``slurm:<id>``, ``docker:<12 hex>``); ``labels`` hold the
    per-process details (container, step) that the job id deliberately leaves out.
    """

    scheduler: str
    job_id: str
    name: str
    labels: dict[str, str]
    # The job's own cgroup: the classified path up to the pod / job / container segment.
    # Not part of equality: one job, whichever of its processes' paths named it.
    cgroup_path: str = field(default="", compare=False)


def classify_cgroup(text: str) -> CgroupIdentity | None:
    """The job named by a ``/proc/<pid>/cgroup`` file (v1, v2 or hybrid), or None."""
    if not any(marker in text for marker in _MARKERS):
        return None  # most processes (kernel threads, services, sessions): no regex at all
    best: CgroupIdentity | None = None
    seen: set[str] = set()
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].strip()
        if path in seen:  # v1 repeats one path on a dozen controller lines
            continue
        seen.add(path)
        found = classify_path(path)
        if found is None:
            continue
        if best is None or _PRIORITY[found.scheduler] < _PRIORITY[best.scheduler]:
            best = found
            if best.scheduler == "k8s":  # nothing outranks a pod
                break
    return best


def own_cgroup_path(job_id: str, path: str) -> str | None:
    """The cgroup of job ``job_id`` that ``path`` lies in, if that job has one of its own:
    the cgroup ``joulestat run`` made for it (``joulestat-job-<id>``), or the pod, Slurm
    job or container cgroup discovery names it by."""
    run = run_cgroup_path(job_id, path)
    if run is not None:
        return run
    found = classify_path(path)
    if found is not None and found.job_id == job_id:
        return found.cgroup_path
    return None


def classify_path(path: str) -> CgroupIdentity | None:
    """The job named by one cgroup path, or None for sessions, services and ``/``."""
    segments = [s for s in path.split("/") if s]  # "..": never matches, so harmless
    if not segments:
        return None
    found = None
    if "kubepods" in path:
        found = _kubernetes(segments)
    if found is None and "slurm" in path:
        found = _slurm(segments)
    if found is None and ("docker" in path or "libpod" in path):
        found = _docker(segments)
    return found


def _kubernetes(segments: list[str]) -> CgroupIdentity | None:
    for i, seg in enumerate(segments):
        uid = qos = None
        pod_index = i
        if seg == "kubepods":
            qos = "guaranteed"
            pod_index = i + 1
            if pod_index < len(segments) and segments[pod_index] in _K8S_QOS_CGROUPFS:
                qos = segments[pod_index]
                pod_index += 1
            if pod_index < len(segments):
                match = _K8S_POD_CGROUPFS.fullmatch(segments[pod_index])
                uid = match.group(1) if match else None
        else:
            match = _K8S_POD_SYSTEMD.fullmatch(seg)
            if match:
                qos = match.group(1) or "guaranteed"
                uid = match.group(2).replace("_", "-")
        if uid is None or qos is None:
            continue
        labels = {"pod_uid": uid, "qos": qos}
        if pod_index + 1 < len(segments):
            container = _K8S_CONTAINER.fullmatch(segments[pod_index + 1])
            if container:
                labels["container_id"] = container.group(1)
        return CgroupIdentity("k8s", f"k8s:{uid}", f"pod-{uid[:8]}", labels,
                              _prefix(segments, pod_index))
    return None


def _slurm(segments: list[str]) -> CgroupIdentity | None:
    for i, seg in enumerate(segments):
        labels: dict[str, str] = {}
        job_index = i + 1
        if _SLURM_V2_SCOPE.fullmatch(seg):
            pass
        elif _SLURM_V1_ROOT.fullmatch(seg) and i + 1 < len(segments):
            uid = _SLURM_UID.fullmatch(segments[i + 1])
            if uid is None:
                continue
            labels["uid"] = uid.group(1)
            job_index = i + 2
        else:
            continue
        if job_index >= len(segments):
            continue
        job = _SLURM_JOB.fullmatch(segments[job_index])
        if job is None:
            continue
        if job_index + 1 < len(segments):
            step = _SLURM_STEP.fullmatch(segments[job_index + 1])
            if step:
                labels["step"] = step.group(1)
        job_id = job.group(1)
        return CgroupIdentity("slurm", f"slurm:{job_id}", f"slurm-{job_id}", labels,
                              _prefix(segments, job_index))
    return None


def _docker(segments: list[str]) -> CgroupIdentity | None:
    for i, seg in enumerate(segments):
        container_id = runtime = None
        last = i
        if seg == "docker" and i + 1 < len(segments) and _DOCKER_HEX.fullmatch(segments[i + 1]):
            container_id, runtime, last = segments[i + 1], "docker", i + 1
        elif match := _DOCKER_SCOPE.fullmatch(seg):
            container_id, runtime = match.group(1), "docker"
        elif match := _PODMAN.fullmatch(seg):
            container_id, runtime = match.group(1), "podman"
        if container_id is None or runtime is None:
            continue
        short = container_id[:12]
        return CgroupIdentity(
            "docker",
            f"docker:{short}",
            f"container-{short}",
            {"container_id": container_id, "runtime": runtime},
            _prefix(segments, last),
        )
    return None


def _prefix(segments: list[str], last: int) -> str:
    """The path of ``segments[0..last]``: the job's own cgroup."""
    return "/" + "/".join(segments[: last + 1])
