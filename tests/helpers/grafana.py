"""The Grafana dashboards of deploy/grafana/dashboards as their tests read them: every
panel (collapsed rows' included), every query (panel targets and query variables), and a
query as Grafana would send it. Shared by tests/unit/project/test_grafana_dashboards.py
(the boards' shape) and tests/system/test_promtool_dashboards.py (promtool on them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.helpers.promql_check import ROOT

DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"
# Grafana's own variables, and what stands in for them when promtool evaluates a query.
BUILTINS = {"__rate_interval": "1m", "__interval": "1m", "__range": "10m"}
_VARIABLE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*\w+\)$", re.S)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' collapsed panels included."""
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's selector."""
    found = []
    for panel in panels(board):
        for target in panel.get("targets", []):
            found.append((f"{board['uid']} panel {panel['id']} {panel['title']!r}",
                          target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["definition"])
            assert match, f"{board['uid']} ${variable['name']}: not label_values(...)"
            found.append((f"{board['uid']} variable ${variable['name']}", match.group(1)))
    return found


def substituted(board: dict[str, Any], expr: str) -> str:
    """The query as Grafana would send it: builtins as durations, variables as All."""
    defined = {v["name"] for v in board["templating"]["list"]}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in BUILTINS:
            return BUILTINS[name]
        assert name in defined, f"{board['uid']}: ${name} is not a dashboard variable"
        return ".*"

    return _VARIABLE.sub(value, expr)


def all_queries() -> list[tuple[str, str]]:
    return [(where, substituted(board, expr))
            for path in DASHBOARDS for board in [load(path)] for where, expr in queries(board)]
