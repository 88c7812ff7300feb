"""How the agent reaches a pod list (https and its CA, the kubelet's ports, the token)
and the --kube-pods setting as the docs and manifests give it. (Falling back from the
kubelet's secure port to its read-only one, over HTTP: tests/system/test_kube_pods.py.)"""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from joulestat.attribution.accounting import AttributionSettings
from joulestat.cli.agent import AGENT_OPTIONS
from joulestat.cli.main import build_parser
from joulestat.core.errors import ConfigError
from joulestat.host import kube as kube_pods
from joulestat.host.identity import NodeSettings
from joulestat.host.kube import (
    PodListError,
    apiserver_source,
    kubelet_sources,
    pods_for,
)
from joulestat.runtime.settings import ResolvedSettings, resolve
from tests.helpers.kube import (
    LOG,
    ROOT,
)


def test_https_needs_the_service_accounts_ca(tmp_path: Path) -> None:
    source = apiserver_source("node-1", {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, tmp_path)
    assert source.url == ("https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3D"
                          "node-1&resourceVersion=0")
    with pytest.raises(PodListError, match="service-account token"):
        source.fetch()
    (tmp_path / "token").write_text("t")
    with pytest.raises(PodListError, match="no CA certificate"):
        source.fetch()


def test_the_token_never_goes_to_a_plain_http_kubelet(sa_dir: Path) -> None:
    secure, read_only = kubelet_sources("node-1", sa_dir)
    assert secure.url == "https://node-1:10250/pods" and secure.sa_dir == sa_dir
    assert read_only.url == "http://node-1:10255/pods" and read_only.sa_dir is None
    assert kubelet_sources("fd00::1", sa_dir)[0].url == "https://[fd00::1]:10250/pods"
    ipv6 = apiserver_source("n", {"KUBERNETES_SERVICE_HOST": "fd00::1",
                                  "KUBERNETES_SERVICE_PORT": "6443"}, sa_dir)
    assert ipv6.url.startswith("https://[fd00::1]:6443/api/v1/pods?")


# The setting, as the docs write it.

def settings_of(argv: list[str], env: dict[str, str]) -> ResolvedSettings:
    args = build_parser().parse_args(["agent", *argv])
    return resolve(args, AGENT_OPTIONS, env)


def pods_from_settings(settings: ResolvedSettings, **kwargs: Any):
    """What the agent builds from its settings (joulestat.runtime.assembly): the pod
    directory for its attribution section, on the node it is told (else its host)."""
    node = settings.section(NodeSettings).node or socket.gethostname()
    return pods_for(settings.section(AttributionSettings), node, **kwargs)


def test_the_documented_flag_and_env_work_as_written(
        sa_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    docs = (ROOT / "docs" / "deploying.md").read_text() + (
        ROOT / "docs" / "jobs.md").read_text()
    assert "JOULESTAT_KUBE_PODS=off" in docs and "--kube-pods kubelet" in docs
    env_name, env_value = "JOULESTAT_KUBE_PODS=off".split("=")
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}

    settings = settings_of(["--discover", "k8s"], {**in_pod, env_name: env_value})
    assert settings["kube_pods"] == "off"
    with caplog.at_level(logging.INFO, logger=LOG):
        assert pods_from_settings(settings, env=in_pod, sa_dir=sa_dir) is None
    assert "--kube-pods off" in caplog.text

    settings = settings_of(["--discover", "k8s", *"--kube-pods kubelet".split(),
                            "--node", "node-1"], {env_name: "apiserver"})  # the flag wins
    assert settings["kube_pods"] == "kubelet"
    pods = pods_from_settings(settings, env={}, sa_dir=sa_dir)
    assert pods is not None
    assert [s.url for s in pods.sources] == ["https://node-1:10250/pods",
                                             "http://node-1:10255/pods"]

    # The default: the API server, when running in a pod.
    settings = settings_of(["--discover", "k8s", "--node", "node-1"], {})
    assert settings["kube_pods"] == "auto"
    pods = pods_from_settings(settings, env=in_pod, sa_dir=sa_dir)
    assert pods is not None
    (source,) = pods.sources
    assert source.url.startswith("https://10.96.0.1:443/api/v1/pods?fieldSelector=spec."
                                 "nodeName%3Dnode-1&")
    assert pods_from_settings(settings, env={}, sa_dir=sa_dir) is None  # not in a pod
    assert pods_from_settings(settings, env=in_pod, sa_dir=sa_dir.parent / "none") is None
    # Nothing to name without k8s discovery.
    assert pods_from_settings(settings_of([], in_pod), env=in_pod, sa_dir=sa_dir) is None

    with pytest.raises(ConfigError, match="JOULESTAT_KUBE_PODS: expected one of"):
        settings_of([], {env_name: "kubernetes"})


def test_agent_help_names_the_flag_and_its_env(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert re.search(r"--kube-pods MODE name discovered pods' jobs after the pod.*"
                     r"\[default: auto\]; env JOULESTAT_KUBE_PODS", text)


def test_the_shipped_manifests_ask_for_auto() -> None:
    env = (ROOT / "deploy" / "kubernetes" / "base" / "agent.env").read_text().splitlines()
    assert "JOULESTAT_KUBE_PODS=auto" in env
    for mode in kube_pods.MODES:  # the setting takes every mode the module knows
        assert settings_of([], {"JOULESTAT_KUBE_PODS": mode.upper()})["kube_pods"] == mode
