"""deploy/kubernetes and deploy/grafana's kustomizations, rendered by kustomize (or
``kubectl kustomize``) as a user applies them: every object validates offline
(tests/helpers/kube_manifests.py), the namespace and the generated ConfigMap's hashed
name reach what uses them, and the example overlay merges its settings and secret.
(The manifests as written: tests/unit/project/test_kubernetes_manifests.py.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.kube_manifests import validate

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = shutil.which("kustomize") or shutil.which("kubectl")
needs_kustomize = pytest.mark.skipif(
    KUSTOMIZE is None, reason="neither kustomize nor kubectl is installed to render with")


def render(folder: Path) -> list[dict]:
    command = [KUSTOMIZE, "build" if Path(KUSTOMIZE).name == "kustomize" else "kustomize",
               str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture
def deploy_copy(tmp_path: Path) -> Path:
    """deploy/ with the example's secret.env filled in from secret.env.example."""
    copy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", copy)
    example = copy / "kubernetes" / "example"
    shutil.copy(example / "secret.env.example", example / "secret.env")
    return copy


@needs_kustomize
@pytest.mark.parametrize("folder", ["kubernetes/base", "kubernetes/prometheus-operator",
                                    "kubernetes/example", "grafana"])
def test_rendered_kustomizations_validate(deploy_copy: Path, folder: str) -> None:
    rendered = render(deploy_copy / folder)
    for obj in rendered:
        validate(obj, f"kustomize {folder}")
    kinds = {obj["kind"] for obj in rendered}
    if folder == "grafana":
        assert kinds == {"ConfigMap"} and len(rendered) == 4
        assert all(o["metadata"]["labels"] == {"grafana_dashboard": "1"} for o in rendered)
        return
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet",
            "Service", "ConfigMap"} <= kinds
    namespaced = [o for o in rendered if o["kind"] not in
                  {"Namespace", "ClusterRole", "ClusterRoleBinding"}]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"joulestat"}
    # The generated ConfigMap's hashed name is the one the DaemonSet loads.
    (daemonset,) = [o for o in rendered if o["kind"] == "DaemonSet"]
    (config,) = [o for o in rendered if o["kind"] == "ConfigMap"]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
    if folder != "kubernetes/base":
        assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    if folder == "kubernetes/example":
        (secret,) = [o for o in rendered if o["kind"] == "Secret"]
        refs = {item["valueFrom"]["secretKeyRef"]["name"] for item in container["env"]
                if "secretKeyRef" in item.get("valueFrom", {})}
        assert refs == {secret["metadata"]["name"]} == {"joulestat"}
        assert config["data"]["JOULESTAT_INTERVAL"] == "2"
        assert config["data"]["JOULESTAT_FLUSH_INTERVAL"] == "10"  # merged, not replaced
        assert container["image"] == "registry.example.com/ml-platform/joulestat:0.1.0"
        monitors = [o for o in rendered if o["kind"] in {"ServiceMonitor", "PrometheusRule"}]
        assert all(o["metadata"]["labels"]["release"] for o in monitors)
