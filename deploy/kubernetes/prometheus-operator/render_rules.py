"""Write prometheusrule.yaml from deploy/prometheus/rules.yml, the one copy to edit.

    python deploy/kubernetes/prometheus-operator/render_rules.py

tests/unit/project/test_prometheus_rules.py fails when the two disagree.
"""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "prometheus" / "rules.yml"
OUT = HERE / "prometheusrule.yaml"

HEADER = (
    "# Generated from deploy/prometheus/rules.yml by render_rules.py (this folder): edit\n"
    "# that file and rerun it. A Prometheus installed by kube-prometheus-stack selects\n"
    "# PrometheusRules by its release label: add it in an overlay (../example does).\n"
)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the PromQL) as | blocks, readable as in rules.yml."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "joulestat", "labels": {"app.kubernetes.io/name": "joulestat"}},
        "spec": {"groups": yaml.safe_load(RULES.read_text())["groups"]},
    }
    return HEADER + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=100)


if __name__ == "__main__":
    OUT.write_text(render())
