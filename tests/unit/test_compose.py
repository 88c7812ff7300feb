"""compose.yaml cannot run here (no Docker engine), so check what can be checked:
every joulestat command in it parses with the real CLI, and the services wire up."""

from __future__ import annotations

from pathlib import Path

import yaml

from agent.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_compose_commands_parse_with_the_real_cli() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert {"agent", "postgres", "prometheus", "dashboard"} <= set(services)
    parser = build_parser()
    for name in ("agent", "dashboard"):
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (ROOT / service["build"]["dockerfile"]).is_file()
        args = parser.parse_args([str(part) for part in service["command"]])
        assert args.command == name
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:9464"]  # the agent's default --metrics-port
