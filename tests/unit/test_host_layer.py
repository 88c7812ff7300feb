"""The host-usage layer reads /proc and cgroups and knows nothing above it: no jobs
registry, attribution, sinks, store or commands (ARCHITECTURE.md: host is below
attribution). Checked on the source, so a stray import fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

HOST = Path(__file__).resolve().parents[2] / "agent" / "host"
ABOVE = ("agent.jobs", "agent.attribution", "agent.sinks", "agent.store", "agent.commands",
         "agent.daemon", "agent.pipeline", "agent.reports", "dashboard")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_host_imports_nothing_above_it() -> None:
    modules = sorted(HOST.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        bad = {m for m in _imports(path) if m.startswith(ABOVE)}
        assert not bad, f"{path.name} imports {sorted(bad)}"
