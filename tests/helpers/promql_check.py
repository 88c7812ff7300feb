"""What the deploy/ tests share: promtool, and which metric names PromQL may use.

The rules (deploy/prometheus/rules.yml) and the Grafana dashboards may only query series
that exist: the agent's metric catalog (docs/metrics.md), the standard process metrics,
the recording rules, and the store-health names in PENDING.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from joulestat.outputs.metric_catalog import METRICS

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (apt-get install prometheus; .ci/run installs it)",
)

# The agent's store and API health (agent/outputs/health.py), written alongside these
# files: the alerts and the agent-health dashboard query them whether or not the catalog
# this checkout has lists them yet. Redundant once it does.
PENDING = frozenset({
    "joulestat_agent_store_up",
    "joulestat_agent_store_buffered_rows",
    "joulestat_agent_store_spooled_bytes",
    "joulestat_agent_store_rows_total",
    "joulestat_agent_store_flush_seconds_sum",
    "joulestat_agent_store_flush_seconds_count",
    "joulestat_agent_api_rejections_total",
})
# prometheus_client's process collector, served beside the catalog (docs/metrics.md).
PROCESS = frozenset({"process_cpu_seconds_total", "process_resident_memory_bytes"})

# A metric name as PromQL writes it; a label value ("model:dram") is skipped because a
# quote or colon comes right before it. Function names have no joulestat_/process_
# prefix and no colon, so they never match.
_NAME = re.compile(r'(?<![\w:"])(joulestat_\w+|process_\w+|[a-z_]+:[\w:]+)')


def catalog_names() -> set[str]:
    names: set[str] = set()
    for spec in METRICS:
        names.add(spec.name)
        if spec.type == "summary":
            names |= {spec.name + "_sum", spec.name + "_count"}
    return names


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def unknown_names(expr: str) -> set[str]:
    """Names in ``expr`` that no agent exports, no rule records and PENDING lacks."""
    known = catalog_names() | recorded_names() | PENDING | PROCESS
    return set(_NAME.findall(expr)) - known


def promtool(*args: str, cwd: Path) -> str:
    """Run promtool; a failure shows its whole output."""
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                            timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output
