"""compose.yaml cannot run here (no Docker engine), so check what can be checked:
every joulestat command in it parses with the real CLI, and the services wire up: the
agent's token file and data volume, Prometheus's config and rules, Grafana's
provisioned data source and dashboards."""

from __future__ import annotations

from pathlib import Path

import yaml

from joulestat.cli.agent import AGENT_OPTIONS
from joulestat.cli.main import build_parser
from joulestat.runtime.settings import resolve

ROOT = Path(__file__).resolve().parents[3]


def services() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def bind_mounts(service: dict) -> dict[str, Path]:
    """Container path -> the repository path a ``./...`` volume mounts there."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            mounts[target] = ROOT / source
    return mounts


def test_compose_commands_parse_with_the_real_cli() -> None:
    compose = services()
    assert {"agent", "postgres", "prometheus", "dashboard", "grafana"} <= set(compose)
    parser = build_parser()
    for name in ("agent", "dashboard"):
        service = compose[name]
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (ROOT / service["build"]["dockerfile"]).is_file()
        args = parser.parse_args([str(part) for part in service["command"]])
        assert args.command == name


def test_the_agent_reads_its_token_from_a_secret_file(tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    agent = compose["services"]["agent"]
    assert "JOULESTAT_API_TOKEN" not in agent["environment"]  # not in `docker inspect`
    (secret,) = agent["secrets"]
    secret_file = ROOT / compose["secrets"][secret]["file"]
    # The file lives where git ignores it, and the user writes it (docs/deploying.md).
    assert secret_file.parent == ROOT / "deploy" / "secrets"
    ignored = (secret_file.parent / ".gitignore").read_text().splitlines()
    assert [line for line in ignored if not line.startswith("#")] == ["*", "!.gitignore"]
    args = build_parser().parse_args([str(part) for part in agent["command"]])
    assert args.config == f"/run/secrets/{secret}"  # where Docker mounts the secret
    # The file's format, as the compose comment and the docs write it, read by the agent.
    sample = tmp_path / "agent.toml"
    sample.write_text('api_token = "0123456789abcdef0123456789abcdef"\n')
    args.config, args.sysfs_root, args.procfs_root = str(sample), str(tmp_path), str(tmp_path)
    settings = resolve(args, AGENT_OPTIONS, env={})
    assert settings["api_token"] == "0123456789abcdef0123456789abcdef"
    assert settings["discover"] == frozenset({"docker", "k8s", "slurm"})


def test_the_agents_data_dir_is_a_volume() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    agent = compose["services"]["agent"]
    data_dir = agent["environment"]["XDG_DATA_HOME"] + "/joulestat"
    (volume,) = [v for v in agent["volumes"] if v.split(":")[1] == data_dir]
    assert volume.split(":")[0] in compose["volumes"]  # named, so it outlives the container


def test_prometheus_loads_the_config_and_rules_from_deploy_prometheus() -> None:
    prometheus = services()["prometheus"]
    mounts = bind_mounts(prometheus)
    assert mounts == {"/etc/prometheus": ROOT / "deploy" / "prometheus"}
    (config_flag,) = [c for c in prometheus["command"] if c.startswith("--config.file=")]
    config_path = mounts["/etc/prometheus"] / Path(config_flag.split("=", 1)[1]).name
    config = yaml.safe_load(config_path.read_text())
    for rule_file in config["rule_files"]:
        assert (config_path.parent / rule_file).is_file()
    (scrape,) = config["scrape_configs"]
    assert scrape["job_name"] == "joulestat"  # the alerts select job="joulestat"
    assert scrape["static_configs"][0]["targets"] == ["127.0.0.1:9464"]  # --metrics-port


def test_grafana_is_provisioned_with_prometheus_and_the_dashboards() -> None:
    compose = services()
    grafana = compose["grafana"]
    assert grafana["profiles"] == ["grafana"]
    mounts = bind_mounts(grafana)
    assert all(path.is_dir() for path in mounts.values())
    (source,) = yaml.safe_load(
        (mounts["/etc/grafana/provisioning/datasources"] / "prometheus.yml").read_text()
    )["datasources"]
    listen = [c for c in compose["prometheus"]["command"] if c.startswith("--web.listen")]
    assert source["url"] == "http://" + listen[0].split("=", 1)[1]
    (provider,) = yaml.safe_load(
        (mounts["/etc/grafana/provisioning/dashboards"] / "joulestat.yml").read_text()
    )["providers"]
    dashboards = mounts[provider["options"]["path"]]
    assert dashboards == ROOT / "deploy" / "grafana" / "dashboards"
    assert len(list(dashboards.glob("*.json"))) == 4
