"""No upward imports: every module of ``agent`` and ``dashboard`` sits in one layer, and
imports only from its own layer or the ones below it.

The map, lowest layer first (the issue's order):

0. foundation: what everything may use and which uses nothing of joulestat: shared
   exceptions, units, redaction, logging set-up, the tick record, setting parsers, the
   version (``agent/__init__``).
1. sensors/host/carbon: reading the hardware, ``/proc`` and cgroups, and the node's
   facts: what it is (``identity``, which names the closest catalog instance types, so
   it sits beside the carbon catalog, not in the foundation) and what its energy costs
   (``carbon``: intensity, PUE, catalog, prices).
2. attribution: dividing a tick's energy among jobs: ``attribution``, ``idle``,
   ``sampler`` and the job registry, accounting, discovery and cgroups of ``agent.jobs``.
3. sinks/store/reports: where figures go and how they are read back: Prometheus, the
   SQL store, reports and comparisons, and the job API's HTTP server and client
   (``http_gate``, ``http_request``, ``agent.jobs.api``, ``api_handler``, ``http_client``).
4. composition: what puts the layers below together: the pipeline, tick loop and
   assembly (sensors + attribution + sinks), the embedded agent (a whole pipeline in a
   user's process), the settings (``config``) and the simulator (``agent.sim``, which
   writes through the store).
5. entry points: what a person runs or imports: the daemon, the CLI and its commands,
   the client library and ``agent.jobs.context`` (the enclosing job as a process sees
   it, from its env; it names the settings' env variables), and the dashboard (which
   reads the store and reports).

A pattern ``a.b`` places the module ``a.b`` alone; ``a.b.*`` places ``a.b`` and every
module under it. The most specific pattern wins. A module no pattern places fails the
test, so a new module gets a layer deliberately; so does a pattern that places nothing,
so the map (and docs that copy it) never names a module that is gone.

Every import counts: at module level, inside functions (this codebase imports late so
a command pays only for what it uses) and under ``if TYPE_CHECKING:``. A type-only
import does not run, but it is the same dependency to a reader and to a type checker;
none in the tree points upward, and keeping it that way costs nothing. Imports by name
at run time (``importlib.import_module``, as ``agent.cli`` loads its commands) are not
seen.
"""

from __future__ import annotations

import ast
import glob
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "dashboard")

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", (
        "agent", "agent.errors", "agent.units", "agent.redact", "agent.logs", "agent.tick",
        "agent.setting_parsers",
    )),
    ("sensors/host/carbon", (
        "agent.sensors.*", "agent.host.*", "agent.carbon.*", "agent.identity",
    )),
    ("attribution", (
        "agent.attribution", "agent.idle", "agent.sampler", "agent.jobs",
        "agent.jobs.registry", "agent.jobs.accounting", "agent.jobs.discovery",
        "agent.jobs.cgroups", "agent.jobs.kube_pods", "agent.jobs.pod_list_source",
        "agent.jobs.discovered_jobs", "agent.jobs.validation", "agent.jobs.model_units",
    )),
    ("sinks/store/reports", (
        "agent.sinks.*", "agent.store.*", "agent.reports.*", "agent.http_gate",
        "agent.http_request", "agent.jobs.api", "agent.jobs.api_handler",
        "agent.jobs.http_client",
    )),
    # Puts the layers below together: a node's pipeline, its tick loop, the settings.
    ("composition", (
        "agent.pipeline", "agent.tick_loop", "agent.assembly", "agent.embedded",
        "agent.config", "agent.sim.*",
    )),
    # What a user runs or imports: the daemon, the CLI, the client library, the dashboard.
    ("entry points", (
        "agent.daemon", "agent.client", "agent.serving", "agent.jobs.context", "agent.cli",
        "agent.__main__", "agent.commands.*", "dashboard.*",
    )),
]


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: str
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def find_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module under ``packages``, by dotted name."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                modules[module_name(path, root)] = path
    return modules


def _known(name: str, modules: dict[str, Path]) -> str:
    """``name``, or the closest enclosing module there is (``agent.store`` for
    ``agent.store.StoreError``)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(name: str, path: Path, root: Path, modules: dict[str, Path],
               packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    """What module ``name`` imports from ``packages``, wherever the import statement is."""
    found = []
    where = str(path.relative_to(root))
    own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=where)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..store import y
                base = own_package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # from agent.store import series: the submodule, if it is one
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules
                       else module for alias in node.names]
        for target in targets:
            if target.split(".")[0] in packages:
                found.append(Import(name, _known(target, modules), where, node.lineno))
    return sorted(set(found), key=lambda imp: (imp.line, imp.imported))


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int | None:
    """Index of the layer whose most specific pattern matches ``module``, else None."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    for index, (_, patterns) in enumerate(layers):
        for pattern in patterns:
            if pattern.endswith(".*"):
                prefix = pattern[:-2]
                hit = module == prefix or module.startswith(prefix + ".")
                specificity = 2 * prefix.count(".")
            else:
                hit = module == pattern
                specificity = 2 * pattern.count(".") + 1  # exact beats a subtree's root
            if hit and (best is None or specificity > best[0]):
                best = (specificity, index)
    return None if best is None else best[1]


def check_layers(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES,
                 layers: list[tuple[str, tuple[str, ...]]] = LAYERS
                 ) -> tuple[list[str], list[str]]:
    """(modules no layer places, upward imports), each as a line a reader can act on."""
    modules = find_modules(root, packages)
    unplaced: set[tuple[str, int, str]] = {
        (str(path.relative_to(root)), 0, f"{name} is in no layer")
        for name, path in modules.items() if layer_of(name, layers) is None}
    upward: list[tuple[str, int, str]] = []
    for name, path in modules.items():
        low = layer_of(name, layers)
        if low is None:
            continue
        for imp in imports_of(name, path, root, modules, packages):
            high = layer_of(imp.imported, layers)
            if high is None:
                unplaced.add((imp.path, imp.line,
                              f"{imp.imported} (imported by {name}) is in no layer"))
            elif high > low:
                upward.append((imp.path, imp.line, f"{name} ({layers[low][0]}) imports "
                               f"{imp.imported} ({layers[high][0]})"))

    def lines(found: Iterable[tuple[str, int, str]]) -> list[str]:
        return [f"{path}:{line}: {what}" if line else f"{path}: {what}"
                for path, line, what in sorted(found)]

    return lines(unplaced), lines(upward)


def unused_patterns(modules: dict[str, Path],
                    layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> list[str]:
    """Patterns of ``layers`` that match no module of ``modules``."""
    return [pattern for _, patterns in layers for pattern in patterns
            if not any(layer_of(name, [("", (pattern,))]) == 0 for name in modules)]


def test_every_module_has_a_layer() -> None:
    unplaced, _ = check_layers()
    assert not unplaced, "place these in LAYERS:\n" + "\n".join(unplaced)


def test_every_pattern_places_a_module() -> None:
    unused = unused_patterns(find_modules(ROOT))
    assert not unused, "no module matches these LAYERS patterns: " + ", ".join(unused)


def test_no_upward_imports() -> None:
    _, upward = check_layers()
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_the_map_covers_the_tree_it_checks() -> None:
    modules = find_modules(ROOT)
    assert len(modules) > 100
    assert {"agent.sensors.rapl", "agent.store.tables", "agent.cli",
            "dashboard.app"} <= set(modules)
    names = [name for name, _ in LAYERS]
    assert names == ["foundation", "sensors/host/carbon", "attribution",
                     "sinks/store/reports", "composition", "entry points"]
    patterns = [pattern for _, layer in LAYERS for pattern in layer]
    assert len(patterns) == len(set(patterns)), "a pattern in two layers"
    assert layer_of("agent") == 0 and layer_of("agent.anything") is None
    assert layer_of("agent.jobs") == 2 and layer_of("agent.jobs.api") == 3
    assert layer_of("agent.sensors") == layer_of("agent.sensors.rapl") == 1


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_reports_an_upward_import(tmp_path: Path) -> None:
    _write(tmp_path, {
        "agent/__init__.py": "",
        "agent/errors.py": "class ConfigError(ValueError):\n    pass\n",
        "agent/config.py": "from agent.errors import ConfigError\n",
        "agent/cli.py": "import agent.config\n",
        "agent/sensors/__init__.py": "",
        # the upward imports: at the top, late inside a function, relative, type-only
        "agent/sensors/factory.py": (
            "from typing import TYPE_CHECKING\n"
            "from agent.errors import ConfigError\n"
            "from agent.config import ConfigError as Old, resolve\n"
            "\n"
            "def build():\n"
            "    from agent import cli\n"
            "    from .. import config\n"
            "\n"
            "if TYPE_CHECKING:\n"
            "    from agent.store.engine import Engine\n"
        ),
        "agent/store/__init__.py": "",
        "agent/store/engine.py": "from agent.sensors.factory import build\n",  # downward
        "dashboard/__init__.py": "",
        "dashboard/app.py": "from agent.store import engine\n",
    })
    unplaced, upward = check_layers(tmp_path)
    assert unplaced == []
    assert upward == [
        "agent/sensors/factory.py:3: agent.sensors.factory (sensors/host/carbon) imports "
        "agent.config (composition)",
        "agent/sensors/factory.py:6: agent.sensors.factory (sensors/host/carbon) imports "
        "agent.cli (entry points)",
        "agent/sensors/factory.py:7: agent.sensors.factory (sensors/host/carbon) imports "
        "agent.config (composition)",
        "agent/sensors/factory.py:10: agent.sensors.factory (sensors/host/carbon) imports "
        "agent.store.engine (sinks/store/reports)",
    ]


def test_the_checker_reports_a_module_in_no_layer(tmp_path: Path) -> None:
    _write(tmp_path, {
        "agent/__init__.py": "",
        "agent/cli.py": "from agent.newthing import run\nfrom agent import __version__\n",
        "agent/newthing.py": "",
    })
    unplaced, upward = check_layers(tmp_path)
    assert unplaced == [
        "agent/cli.py:1: agent.newthing (imported by agent.cli) is in no layer",
        "agent/newthing.py: agent.newthing is in no layer",
    ]
    assert upward == []
    assert "agent.cli" not in unused_patterns(find_modules(tmp_path))
    assert "agent.sensors.*" in unused_patterns(find_modules(tmp_path))


def test_docs_architecture_shows_this_map_and_names_only_real_paths() -> None:
    """docs/architecture.md copies the map for a newcomer: the same layers in the same
    order, and every path it names exists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d)\. ([^|]+?) \|", text, flags=re.MULTILINE)
    assert [(int(n), name.replace(", ", "/")) for n, name in rows] == [
        (i, name) for i, (name, _) in enumerate(LAYERS)]
    paths = set(re.findall(r"`((?:agent|dashboard|migrations|tests)/[\w/.]*)`", text))
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists()
                     and not glob.glob(str(ROOT / p)))
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"
