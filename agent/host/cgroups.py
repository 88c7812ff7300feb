"""The cgroup filesystem: where it is mounted, what a process's cgroup path says (which
pod, container or Slurm job it belongs to), and a cgroup's CPU-time counter.

**Counters.** A job whose processes live in a cgroup of their own is measured by one
file per tick: ``cpu.stat`` ``usage_usec`` on cgroup v2 (there on every non-root cgroup,
with or without the cpu controller), ``cpuacct.usage`` (nanoseconds) on v1. Both count
every process that ever ran in the cgroup and its descendants, those that exited
included, so a job's short-lived helpers are never missed and nothing is counted twice.
Layouts, under a root that is normally ``<sysfs>/fs/cgroup``:

- unified (v2 only): ``<root>/cgroup.controllers`` exists;
- hybrid: v1 controllers in ``<root>/<controller>``, v2 at ``<root>/unified``;
- legacy (v1 only): ``<root>/cpuacct`` or ``<root>/cpu,cpuacct``.

``/proc/<pid>/cgroup`` names a process's cgroup in each hierarchy (``0::<path>`` for v2,
``<n>:cpu,cpuacct:<path>`` for v1); paths are relative to the reader's cgroup namespace,
so a path holding ``..`` (the process is outside the agent's namespace) is not read.

**Which job a process belongs to**, read from the text of ``/proc/<pid>/cgroup``.
Schedulers put every job in its own cgroup and encode the job's identity in the cgroup's
path, so one small file per process says which pod, container or Slurm job it belongs
to, with no API call and no privileges (the file is world-readable). This module only
parses that text; :mod:`joulestat.host.discovery` reads the files. The file has
one ``hierarchy-id:controllers:path`` line per hierarchy: many lines on cgroup v1, a
single ``0::/path`` on v2, both on hybrid hosts. Every path is classified and the most
specific answer wins, so a v1 host whose ``name=systemd`` line says ``/user.slice`` but
whose ``cpu`` line says ``/kubepods/...`` still yields the pod.

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
the host's ``docker ps`` lists. A process inside a container with its own cgroup
namespace sees ``0::/`` and cannot tell which job it is in from this file: that is
``None``, as are user sessions and services.

Each answer also carries the job's own cgroup (``cgroup_path``: the path cut after the
pod, Slurm job or container segment), whose CPU counter
:mod:`joulestat.host.cgroup_jobs` reads instead of walking the job's processes. Cgroups
that ``joulestat run`` makes for its command are named ``joulestat-job-<job id>``
(:func:`run_cgroup_name`); :func:`own_cgroup_path` knows both.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from joulestat.host.kernel_file import KernelFile

log = logging.getLogger(__name__)

__all__ = ["CgroupCounter", "CgroupFs", "CgroupIdentity", "CgroupRef", "classify_cgroup",
           "classify_path", "own_cgroup_path", "parse_proc_cgroup", "run_cgroup_name",
           "run_cgroup_path"]


# -- The cgroup filesystem: where it is mounted, and a job cgroup's CPU-time counter ----

V2 = 2
V1_CPUACCT = 1


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """A cgroup in one hierarchy: ``version`` 2, or 1 for the v1 cpuacct hierarchy."""

    version: int
    path: str  # as /proc/<pid>/cgroup names it, e.g. "/system.slice/docker-<id>.scope"

    def contains(self, other: CgroupRef) -> bool:
        """True when ``other`` is this cgroup or below it (the same hierarchy)."""
        if other.version != self.version:
            return False
        if self.path == "/" or other.path == self.path:
            return True
        return other.path.startswith(self.path.rstrip("/") + "/")

    @property
    def key(self) -> str:
        """A stable text form, for checkpoints: ``v2:/path``."""
        return f"v{self.version}:{self.path}"

    @classmethod
    def from_key(cls, key: str) -> CgroupRef:
        version, _, path = key.partition(":")
        if version not in ("v1", "v2") or not path.startswith("/"):
            raise ValueError(f"not a cgroup key: {key!r}")
        return cls(int(version[1]), path)

    def __str__(self) -> str:
        return f"cgroup v2 {self.path}" if self.version == V2 else f"cgroup v1 cpuacct {self.path}"

    @classmethod
    def from_text(cls, text: str) -> CgroupRef | None:
        """The cgroup :meth:`__str__` wrote (a job's ``cpu_source`` label), or None for
        any other text ("process tree")."""
        for prefix, version in (("cgroup v2 ", V2), ("cgroup v1 cpuacct ", V1_CPUACCT)):
            if text.startswith(prefix) and text[len(prefix):].startswith("/"):
                return cls(version, text[len(prefix):])
        return None


def parse_proc_cgroup(text: str) -> dict[int, str]:
    """{2: the v2 path, 1: the cpuacct path} from a ``/proc/<pid>/cgroup`` text."""
    found: dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            found[V2] = path.strip()
        elif "cpuacct" in controllers.split(","):
            found[V1_CPUACCT] = path.strip()
    return found


def _usage_usec_ns(text: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) * 1000
    raise ValueError("no usage_usec line")


class CgroupCounter:
    """One job cgroup's cumulative CPU time in ns, re-read with ``pread`` each tick."""

    def __init__(self, ref: CgroupRef, directory: Path) -> None:
        self.ref = ref
        self.directory = directory
        name = "cpu.stat" if ref.version == V2 else "cpuacct.usage"
        self._file = KernelFile(directory / name)

    def read_ns(self) -> int | None:
        """The counter, or None once the cgroup is gone (or was never readable)."""
        try:
            text = self._file.read_text()
            if self._file.unlinked():
                raise FileNotFoundError(self._file.path)
        except OSError:
            self._file.close()
            return None
        try:
            return _usage_usec_ns(text) if self.ref.version == V2 else int(text.strip())
        except ValueError:
            log.warning("%s: cannot parse the CPU counter %r", self._file.path, text[:80])
            return None

    def populated(self) -> bool:
        """Whether any process is left in the cgroup or below it."""
        if self.ref.version == V2:
            try:
                text = (self.directory / "cgroup.events").read_text()
            except OSError:
                return False
            return "populated 1" in text
        try:
            if (self.directory / "cgroup.procs").read_text().strip():
                return True
            return any((child / "cgroup.procs").read_text().strip()
                       for child in self.directory.iterdir() if child.is_dir())
        except OSError:
            return False

    def close(self) -> None:
        self._file.close()


class CgroupFs:
    """The cgroup hierarchies this node exposes under ``root`` that hold CPU counters."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.v2: Path | None = None
        self.v1_cpuacct: Path | None = None
        if (self.root / "cgroup.controllers").exists():
            self.v2 = self.root
        else:
            if (self.root / "unified" / "cgroup.controllers").exists():
                self.v2 = self.root / "unified"
            for name in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                if (self.root / name / "cpuacct.usage").exists():
                    self.v1_cpuacct = self.root / name
                    break

    @property
    def available(self) -> bool:
        return self.v2 is not None or self.v1_cpuacct is not None

    def describe(self) -> str:
        parts = []
        if self.v2 is not None:
            parts.append(f"v2 at {self.v2}")
        if self.v1_cpuacct is not None:
            parts.append(f"v1 cpuacct at {self.v1_cpuacct}")
        return ", ".join(parts) or f"no cgroup CPU counters under {self.root}"

    def refs(self, proc_cgroup_text: str) -> list[CgroupRef]:
        """A process's cgroups in the hierarchies mounted here, v2 first."""
        paths = parse_proc_cgroup(proc_cgroup_text)
        found = []
        if self.v2 is not None and V2 in paths:
            found.append(CgroupRef(V2, paths[V2]))
        if self.v1_cpuacct is not None and V1_CPUACCT in paths:
            found.append(CgroupRef(V1_CPUACCT, paths[V1_CPUACCT]))
        return found

    def directory(self, ref: CgroupRef) -> Path | None:
        """Where ``ref`` lives here; None for a path outside this namespace's view."""
        base = self.v2 if ref.version == V2 else self.v1_cpuacct
        if base is None or not ref.path.startswith("/") or ".." in ref.path.split("/"):
            return None
        return base / ref.path.lstrip("/")

    def counter(self, ref: CgroupRef) -> CgroupCounter | None:
        """An open counter for ``ref``, or None when it cannot be read here."""
        directory = self.directory(ref)
        if directory is None:
            return None
        counter = CgroupCounter(ref, directory)
        if counter.read_ns() is None:
            counter.close()
            return None
        return counter


# -- Which job a process belongs to, read from the text of ``/proc/<pid>/cgroup`` ------

# The cgroup `joulestat run` makes for a job's command (joulestat.host.cgroup_jobs).
RUN_CGROUP_PREFIX = "joulestat-job-"


def run_cgroup_name(job_id: str) -> str:
    """The cgroup ``joulestat run`` makes for job ``job_id``'s command."""
    return RUN_CGROUP_PREFIX + job_id


def run_cgroup_path(job_id: str, path: str) -> str | None:
    """The cgroup ``joulestat run`` made for ``job_id`` that ``path`` lies in, or None."""
    name = run_cgroup_name(job_id)
    if name not in path:
        return None
    segments = path.split("/")
    for i, segment in enumerate(segments):
        if segment == name:
            return "/".join(segments[: i + 1])
    return None


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
