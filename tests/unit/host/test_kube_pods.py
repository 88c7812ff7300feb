"""Pod lists as agent/host/kube.py reads them, without a port: items indexed by
UID (a static pod's mirror under its hashed UID too), metadata-only lists taken and
anything else refused, and a pod's labels turned into job labels as kube-state-metrics
names them, within the registry's limits. (Reading the list over HTTP, and discovery
naming pods from it: tests/system/test_kube_pods.py.)"""

from __future__ import annotations

import json

import pytest

from joulestat.attribution.registry import JobRegistry
from joulestat.core.validation import MAX_LABELS
from joulestat.host.kube import PodInfo, job_labels, parse_pod_list
from tests.helpers.kube import STATIC, UID, WEB, pod_item, pod_list


def test_parse_pod_list_indexes_uid_and_static_pods_mirror_hash() -> None:
    mirror = pod_item("f0f0f0f0-0000-4000-8000-000000000001", "kube-system",
                      "kube-proxy-node-1", {"k8s-app": "kube-proxy"},
                      {"kubernetes.io/config.mirror": STATIC, "other": "x"})
    broken = [{"metadata": {"uid": "x", "namespace": "a"}}, {"metadata": "?"}, 7]
    pods = parse_pod_list(pod_list(WEB, mirror, *broken))
    assert pods[UID] == PodInfo(UID, "default", "web-7d9c", WEB["metadata"]["labels"])
    assert pods[UID].job_name == "default/web-7d9c"
    assert pods[STATIC].job_name == "kube-system/kube-proxy-node-1"
    assert len(pods) == 3  # the mirror pod under both UIDs; broken items skipped


def test_parse_pod_list_reads_metadata_only_lists_and_refuses_the_rest() -> None:
    partial = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
               "items": [{"metadata": {"uid": UID.upper(), "namespace": "default",
                                       "name": "web-7d9c"}}]}
    assert parse_pod_list(json.dumps(partial).encode())[UID].labels == {}
    with pytest.raises(ValueError, match="not a pod list"):
        parse_pod_list(b'{"kind": "Status", "code": 403}')
    with pytest.raises(ValueError, match="not JSON"):
        parse_pod_list(b"<html>")


def test_job_labels_read_like_kube_state_metrics_and_respect_the_registry() -> None:
    pod = PodInfo(UID, "default", "web-7d9c", {
        "app.kubernetes.io/name": "web",
        "app_kubernetes_io/name": "clash",  # sanitizes to the same key: first one wins
        "x" * 60: "key too long",
        "note": "v" * 300,
        "team": "search",
    })
    labels = job_labels(pod)
    assert labels == {"namespace": "default", "pod": "web-7d9c",
                      "label_app_kubernetes_io_name": "web", "label_team": "search"}
    registry = JobRegistry()
    registry.register("ok", labels=labels)  # every key and value passes validation
    many = PodInfo(UID, "default", "web", {f"k{i:02d}": "v" for i in range(40)})
    assert len(job_labels(many, room=MAX_LABELS - 3)) == MAX_LABELS - 3
