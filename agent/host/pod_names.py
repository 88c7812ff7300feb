"""Where discovered pods' names come from (``--kube-pods``), apart from the pod list
readers of :mod:`joulestat.host.kube`: the settings name the modes on every command,
and reading them should not load an HTTP and TLS client (http.client, ssl) that only
an agent on a Kubernetes node uses (40 ms of every command's start-up)."""

from __future__ import annotations

from enum import StrEnum


class PodNames(StrEnum):
    """Where discovered pods' names come from (``--kube-pods``): the API server's pod
    list, the kubelet's, ``auto`` (the API server when running in a pod), or ``off``
    (``pod-<uid8>``)."""

    AUTO = "auto"
    APISERVER = "apiserver"
    KUBELET = "kubelet"
    OFF = "off"


MODES = tuple(mode.value for mode in PodNames)
