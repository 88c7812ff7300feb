"""Pods named after the pod: agent/host/kube.py reading a pod list over HTTP, and
sync_registry's use of it.

The pod list is served by a local http.server on 127.0.0.1 (the module takes an
``http://`` base URL in place of the API server's https one), the service account is a
folder in tmp_path, and the pods' processes a fake /proc (tests/helpers/kube.py; the
``kube``, ``sa_dir`` and ``node`` fixtures are in tests/system/conftest.py). Reading a
list without a port (parsing, labels) and the setting: tests/unit/attribution/.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from joulestat.attribution.discovered import sync_registry
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.host.kube import (
    PodDirectory,
    PodListError,
    PodListSource,
    apiserver_source,
    pod_directory,
)
from tests.helpers.kube import (
    CID,
    KINDS,
    LOG,
    STATIC,
    UID,
    UID2,
    UID3,
    WEB,
    WORKER,
    Clock,
    FakeKube,
    PodNode,
    directory,
    pod_item,
    pod_list,
    pod_proc,
)

# Discovery: a pod becomes its namespace and name, with its labels.

def test_a_discovered_pod_is_named_after_the_pod_with_its_labels(
        node: PodNode, kube: FakeKube) -> None:
    node.add_pod(100, UID)
    node.sync()
    job = node.registry.get(f"k8s:{UID}")
    assert job.name == "default/web-7d9c"
    assert job.origin == "discovered:k8s" and job.pids == {100}
    assert job.labels == {
        "pod_uid": UID, "qos": "burstable", "container_id": CID,
        "namespace": "default", "pod": "web-7d9c", "label_app_kubernetes_io_name": "web",
        "label_pod_template_hash": "7d9c", "label_team": "search"}
    (path, headers), = kube.requests
    assert path == "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=0"
    assert headers["Authorization"] == "Bearer fake-token-123"
    assert headers["Accept"].startswith(
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,")


def test_the_kubelets_list_names_pods_too(tmp_path: Path, kube: FakeKube,
                                          sa_dir: Path) -> None:
    proc = tmp_path / "proc"
    pod_proc(proc, 100, STATIC, qos="besteffort")
    kube.body = pod_list(pod_item(STATIC, "kube-system", "etcd-node-1", {"tier": "control"}))
    pods = pod_directory("kubelet", "node-1", sa_dir=sa_dir, base_url=kube.url)
    registry = JobRegistry()
    sync_registry(registry, proc, KINDS, pods=pods)
    assert registry.get(f"k8s:{STATIC}").name == "kube-system/etcd-node-1"
    assert [path for path, _ in kube.requests] == ["/pods"]


def test_a_new_uid_triggers_one_read_and_known_ones_none(
        node: PodNode, kube: FakeKube) -> None:
    node.add_pod(100, UID)
    for _ in range(5):  # a steady node: one read, then none
        node.sync()
        node.clock.now += 5
    assert len(kube.requests) == 1
    kube.body = pod_list(WEB, WORKER)
    node.add_pod(200, UID2)
    node.sync()
    assert len(kube.requests) == 2
    assert node.registry.get(f"k8s:{UID2}").name == "ml/trainer-0"
    assert node.registry.get(f"k8s:{UID2}").labels["label_app"] == "trainer"


def test_a_pod_seen_before_a_new_read_is_allowed_waits_one_pass_for_its_name(
        node: PodNode, kube: FakeKube) -> None:
    node.add_pod(100, UID)
    node.sync()
    node.clock.now += 2  # under min_refresh_s (5 s) after the last read
    kube.body = pod_list(WEB, WORKER)
    node.add_pod(200, UID2)
    node.sync()
    assert len(kube.requests) == 1
    assert {j.id for j in node.registry.jobs()} == {f"k8s:{UID}"}  # not yet, not misnamed
    node.clock.now += 5
    node.sync()
    assert len(kube.requests) == 2
    assert node.registry.get(f"k8s:{UID2}").name == "ml/trainer-0"


def test_a_pod_the_list_does_not_name_keeps_pod_uid8_without_more_reads(
        node: PodNode, kube: FakeKube) -> None:
    node.add_pod(100, UID3)  # not in the list
    for _ in range(3):
        node.sync()
        node.clock.now += 10
    assert node.registry.get(f"k8s:{UID3}").name == "pod-7e6d5c4b"
    assert len(kube.requests) == 1


def test_reads_are_bounded_however_fast_pods_appear(
        tmp_path: Path, kube: FakeKube, sa_dir: Path) -> None:
    clock = Clock()
    pods = directory(kube, sa_dir, clock, min_refresh_s=5.0)
    for second in range(60):  # a new pod every second for a minute
        pods.lookup([f"{second:08x}-0000-4000-8000-000000000000"])
        clock.now += 1
    assert pods.refreshes == len(kube.requests) == 12


@pytest.mark.parametrize("status, why", [
    (403, 'HTTP 403 Forbidden: pods is forbidden: User "system:serviceaccount:joulestat:'
          'joulestat" cannot list resource "pods"'),
    (None, "connection refused"),
])
def test_an_unreadable_list_falls_back_to_pod_uid8_and_logs_once(
        node: PodNode, kube: FakeKube, caplog: pytest.LogCaptureFixture,
        status: int | None, why: str) -> None:
    if status is None:
        kube.close()  # nothing listens there any more
    else:
        kube.status = status
        message = why.split(": ", 1)[1]
        kube.body = json.dumps({"kind": "Status", "code": 403, "message": message}).encode()
    node.add_pod(100, UID)
    with caplog.at_level(logging.DEBUG, logger=LOG):
        node.sync()
        for uid, pid in [(UID2, 200), (UID3, 300)]:  # later pods, later (failing) reads
            node.clock.now += 31
            node.add_pod(pid, uid)
            node.sync()
    assert node.registry.get(f"k8s:{UID}").name == "pod-8a1f4c2e"
    assert node.registry.get(f"k8s:{UID3}").name == "pod-7e6d5c4b"
    assert node.pods.refreshes == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert why in warnings[0] and "pod-<uid8>" in warnings[0]


def test_after_a_failure_reads_wait_retry_after_s_then_name_new_pods(
        node: PodNode, kube: FakeKube,
        caplog: pytest.LogCaptureFixture) -> None:
    kube.status, kube.body = 500, b"{}"
    node.add_pod(100, UID)
    node.sync()
    kube.status, kube.body = 200, pod_list(WEB, WORKER)
    node.add_pod(200, UID2)
    node.clock.now += 10  # within retry_after_s: no read, and the pod is not held back
    node.sync()
    assert node.registry.get(f"k8s:{UID2}").name == "pod-0c9b8a7d"
    assert len(kube.requests) == 1
    node.clock.now += 30
    node.add_pod(300, UID3)
    kube.body = pod_list(WEB, WORKER, pod_item(UID3, "ml", "eval-1"))
    with caplog.at_level(logging.INFO, logger=LOG):
        node.sync()
    assert node.registry.get(f"k8s:{UID3}").name == "ml/eval-1"
    # Names are kept: the registry refuses another name under a job's id.
    assert node.registry.get(f"k8s:{UID}").name == "pod-8a1f4c2e"
    assert any("read again" in r.getMessage() for r in caplog.records)


def test_a_slow_list_times_out(kube: FakeKube, sa_dir: Path) -> None:
    # The server holds the request 30 s: giving up well before that is the timeout's doing
    # (the bound leaves a loaded machine room; the fake lets the request go at close).
    kube.delay_s = 30.0
    source = apiserver_source("node-1", {}, sa_dir, base_url=kube.url, timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(PodListError, match=r"no answer within 0\.2 s"):
        source.fetch()
    assert time.monotonic() - started < 10.0


def test_a_job_keeps_the_name_it_was_registered_with(
        node: PodNode, kube: FakeKube) -> None:
    """After a restart the registry holds the job under its stored name: no conflict,
    and no read for a pod already known."""
    node.add_pod(100, UID)
    node.registry.restore(Job(f"k8s:{UID}", "pod-8a1f4c2e", "other", {"pod_uid": UID}, set(),
                         time.time(), "discovered:k8s"))
    node.sync()
    assert node.registry.get(f"k8s:{UID}").name == "pod-8a1f4c2e"
    assert node.registry.get(f"k8s:{UID}").pids == {100}
    assert kube.requests == []


def test_a_pod_name_too_long_for_a_job_name_keeps_pod_uid8(
        node: PodNode, kube: FakeKube) -> None:
    kube.body = pod_list(pod_item(UID, "default", "a" * 253))
    node.add_pod(100, UID)
    node.sync()
    job = node.registry.get(f"k8s:{UID}")
    assert job.name == "pod-8a1f4c2e" and job.labels["pod"] == "a" * 253


# Sources: what is sent where.


def test_kubelet_mode_tries_the_read_only_port_after_the_secure_one(
        kube: FakeKube, sa_dir: Path) -> None:
    port = int(kube.url.rsplit(":", 1)[1])
    refused = PodListSource("http://127.0.0.1:9/pods", "the kubelet (refused)", sa_dir)
    read_only = PodListSource(f"http://127.0.0.1:{port}/pods", "the read-only port", None)
    pods = PodDirectory([refused, read_only])
    known, pending = pods.lookup([UID])
    assert known[UID].job_name == "default/web-7d9c" and not pending
    (_, headers), = kube.requests
    assert "Authorization" not in headers
