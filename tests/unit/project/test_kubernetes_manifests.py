"""deploy/kubernetes, without a cluster.

Every manifest validates offline against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: no unknown fields) for the oldest and newest versions we
claim; the prometheus-operator objects against the fields we use of their CRDs
(tests/helpers/kube_manifests.py). The agent's arguments and environment are checked
against the real CLI and settings, and the pieces that must agree (selectors, ports,
names, secrets) are checked to agree. What the kustomizations render, through kustomize
or kubectl, is checked in tests/system/test_kustomize.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from joulestat.cli.agent import AGENT_OPTIONS
from joulestat.cli.main import build_parser
from joulestat.runtime.settings import OPTIONS, resolve
from tests.helpers.kube_manifests import validate

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "deploy" / "kubernetes"
# Environment the DaemonSet sets that is not a joulestat setting.
OTHER_ENV = {"XDG_DATA_HOME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
             "PYTHONDONTWRITEBYTECODE"}


def manifests() -> list[Path]:
    return sorted(p for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml")


def objects(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def base(kind: str) -> dict:
    (found,) = [o for p in manifests() for o in objects(p) if o["kind"] == kind]
    return found


@pytest.mark.parametrize("path", manifests(), ids=lambda p: str(p.relative_to(KUBE)))
def test_each_manifest_validates_against_the_schemas(path: Path) -> None:
    docs = objects(path)
    assert docs
    for obj in docs:
        validate(obj, str(path.relative_to(ROOT)))


def test_every_manifest_is_in_a_kustomization() -> None:
    listed = set()
    for kustomization in KUBE.rglob("kustomization.yaml"):
        for entry in yaml.safe_load(kustomization.read_text()).get("resources", []):
            target = (kustomization.parent / entry).resolve()
            assert target.exists(), f"{kustomization}: {entry} does not exist"
            listed.add(target)
    assert set(manifests()) <= listed


def _env_files() -> dict[str, str]:
    """agent.env as the ConfigMap the DaemonSet loads."""
    values = {}
    for line in (KUBE / "base" / "agent.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key] = value
    return values


def _settings(env: dict[str, str], tmp_path: Path) -> dict:
    """The agent's settings from the DaemonSet's args and env, through the real CLI."""
    container = base("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.command == "agent"
    # /host/sys and /host/proc exist only in the pod; the settings check they are folders.
    args.sysfs_root = args.procfs_root = str(tmp_path)
    return resolve(args, AGENT_OPTIONS, env=env)


def test_the_agent_accepts_the_daemonsets_args_and_environment(tmp_path: Path) -> None:
    container = base("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    env = dict(_env_files())
    stand_ins = {"spec.nodeName": "node-1", "api-token": "t" * 32,
                 "store-url": "postgresql+psycopg://joulestat:pw@db:5432/joulestat"}
    for item in container["env"]:
        source = item.get("valueFrom", {})
        key = source.get("fieldRef", {}).get("fieldPath") or source.get(
            "secretKeyRef", {}).get("key")
        env[item["name"]] = item["value"] if "value" in item else stand_ins[key]
    agent_env = {k for k in env if k.startswith("JOULESTAT_")}
    assert agent_env <= {OPTIONS[name].env for name in AGENT_OPTIONS}, "unknown setting"
    assert set(env) - agent_env <= OTHER_ENV
    settings = _settings(env, tmp_path)
    assert settings["node"] == "node-1" and settings["discover"] == frozenset({"k8s"})
    assert settings["kube_pods"] == "auto"  # pods named from the API server (rbac.yaml)
    # The job API leaves loopback only with a token.
    assert settings["api_host"] == "0.0.0.0" and settings["api_token"]
    # The example overlay's settings parse too.
    example = yaml.safe_load((KUBE / "example" / "kustomization.yaml").read_text())
    (generator,) = example["configMapGenerator"]
    env.update(line.split("=", 1) for line in generator["literals"])
    assert _settings(env, tmp_path)["interval"] == 2.0


def test_the_daemonset_measures_the_node_read_only() -> None:
    pod = base("DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostPID"] and pod["hostNetwork"]
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for name, host, inside in [("sys", "/sys", "/host/sys"), ("proc", "/proc", "/host/proc")]:
        assert volumes[name]["hostPath"]["path"] == host
        assert mounts[name] == {"name": name, "mountPath": inside, "readOnly": True}
        assert f"--{name}fs-root={inside}" in container["args"]
    # The data dir (XDG_DATA_HOME/joulestat) is on the node's disk: the spool outlives pods.
    env = {item["name"]: item for item in container["env"]}
    assert mounts["data"]["mountPath"] == env["XDG_DATA_HOME"]["value"] + "/joulestat"
    assert volumes["data"]["hostPath"]["path"] == "/var/lib/joulestat"
    assert env["JOULESTAT_NODE"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    token = env["JOULESTAT_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token["name"] == "joulestat" and not token.get("optional")
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {t["key"] for t in pod["tolerations"]} >= {"nvidia.com/gpu", "aws.amazon.com/neuron"}


def _quantity(text: str) -> float:
    units = {"m": 1e-3, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def test_resources_leave_headroom_over_the_measured_overhead() -> None:
    resources = base("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["resources"]
    requests, limits = resources["requests"], resources["limits"]
    # Measured: 0.1-0.5 % of a core, under 50 MiB RSS on a quiet node.
    assert _quantity(requests["cpu"]) >= 2 * 0.005
    assert _quantity(requests["memory"]) >= 50 * 2**20
    for key in ("cpu", "memory"):
        assert _quantity(limits[key]) >= 4 * _quantity(requests[key])


def test_service_servicemonitor_and_rbac_agree_with_the_daemonset() -> None:
    daemonset, service, monitor = base("DaemonSet"), base("Service"), base("ServiceMonitor")
    pod = daemonset["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports == {"metrics": 9464, "api": 9465}  # the agent's defaults
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["clusterIP"] == "None"
    (service_port,) = service["spec"]["ports"]
    assert ports[service_port["targetPort"]] == service_port["port"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service_port["name"]]
    # The alerts in deploy/prometheus/rules.yml select job="joulestat".
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "joulestat"

    role, binding = base("ClusterRole"), base("ClusterRoleBinding")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "joulestat",
                                    "namespace": "joulestat"}]
    assert pod["spec"]["serviceAccountName"] == base("ServiceAccount")["metadata"]["name"]
    # The service-account token is how the agent lists its node's pods (--kube-pods auto).
    assert pod["spec"]["automountServiceAccountToken"] is True


def test_the_example_secret_has_the_keys_the_daemonset_reads() -> None:
    container = base("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    wanted = {item["valueFrom"]["secretKeyRef"]["key"]
              for item in container["env"] if "secretKeyRef" in item.get("valueFrom", {})}
    lines = (KUBE / "example" / "secret.env.example").read_text().splitlines()
    keys = {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}
    assert keys == wanted == {"api-token", "store-url"}
    assert (KUBE / "example" / ".gitignore").read_text().split() == ["secret.env"]
