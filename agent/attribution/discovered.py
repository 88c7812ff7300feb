"""Discovery's scans made into jobs: the registry's discovered jobs kept equal to what the
latest scan of the node (:mod:`joulestat.host.discovery`) found, and pods named after
the pod where the pod list can be read (:mod:`joulestat.host.kube`). The one part of
discovery that writes to the registry: names, labels and the end of vanished jobs are
decided here.
"""

from __future__ import annotations

from pathlib import Path

from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.validation import MAX_LABELS, JobError, JobNotFound, validate_name
from joulestat.host.discovery import ScanCache, discover
from joulestat.host.identity import SAGEMAKER_RESOURCE_CONFIG
from joulestat.host.kube import PodDirectory, PodInfo, job_labels

__all__ = ["sync_registry"]


def sync_registry(registry: JobRegistry, procfs_root: Path, kinds: frozenset[str],
                  sagemaker_config: Path = SAGEMAKER_RESOURCE_CONFIG,
                  cache: ScanCache | None = None, pods: PodDirectory | None = None) -> None:
    """Make the registry's discovered jobs match one scan: new ones registered, their
    process sets replaced, and the ones that vanished ended.

    With ``pods`` (:mod:`joulestat.host.kube`), a pod not registered yet is named after
    the pod (``namespace/pod``, as :func:`_registry_name` makes it acceptable) and gets
    its labels (``namespace``, ``pod``, ``label_<key>``: ``kube_pods.job_labels``).
    Only pods not registered yet are looked up, all at once, so the pod list is read
    when a new pod appears, not every pass. A pod the list does not
    name keeps ``pod-<uid8>``; one the list may not be read for yet (read less than
    ``min_refresh_s`` ago) is registered at the next pass, so that its name is right
    for good. A registered job keeps the name it has (a registry refuses another name
    under the same id), whatever the pod list says later.
    """
    found = {job.job_id: job for job in discover(procfs_root, kinds, sagemaker_config,
                                                 cache)}
    named: dict[str, PodInfo] = {}
    pending: set[str] = set()
    if pods is not None:
        new_pods = {job.labels.get("pod_uid", ""): job for job in found.values()
                    if job.scheduler == "k8s" and not _registered(registry, job.job_id)}
        new_pods.pop("", None)
        if new_pods:
            named, pending = pods.lookup(new_pods)
    for job in found.values():
        uid = job.labels.get("pod_uid", "").lower() if job.scheduler == "k8s" else ""
        if uid in pending:
            continue
        labels = {key: value[:256] for key, value in job.labels.items()}
        name = job.name
        pod = named.get(uid)
        if pod is not None:
            name = _registry_name(pod.job_name, job.name)
            labels.update(job_labels(pod, room=MAX_LABELS - len(labels)))
        existing = _registered(registry, job.job_id)
        name = existing.name if existing is not None else _registry_name(name, name)
        registry.register(name, job.kind, labels=labels, job_id=job.job_id,
                          origin=f"discovered:{job.scheduler}")
        registry.set_pids(job.job_id, job.pids)
    for job in registry.jobs(running_only=True):
        if job.origin.startswith("discovered:") and job.id not in found:
            registry.end(job.id)


def _registered(registry: JobRegistry, job_id: str) -> Job | None:
    try:
        return registry.get(job_id)
    except JobNotFound:
        return None


def _registry_name(name: str, fallback: str) -> str:
    """``name``, or with ``\\`` made ``_`` where the registry refuses it (a Slurm name may
    hold one), or ``fallback`` (the scheduler's own name) if it is refused even so: a pod
    name is up to 253 characters, a job name up to 200."""
    for candidate in (name, name.replace("\\", "_"), fallback):
        try:
            return validate_name(candidate)
        except JobError:
            continue
    return fallback
