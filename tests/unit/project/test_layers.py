"""A module's directory is its layer, and a module imports only from its own layer or
the ones below it.

The layers, lowest first (docs/architecture.md draws them)::

    0. core                          errors, units, the tick record, redaction, logging
    1. devices, host, carbon         hardware, /proc and cgroups, the node's facts
    2. attribution                   a tick's energy divided among jobs
    3. store, outputs, api, reports  where figures go and how they are read back
    4. runtime                       what puts the layers below together
    5. cli, client, dashboard        what a person runs or imports
    6. integrations                  the client inside ML frameworks (Trainer, Lightning,
                                     MLflow, W&B)

The rule is over package prefixes: ``joulestat.<dir>.…`` is in ``<dir>``'s layer. The
``joulestat`` package itself (``__init__``, ``__main__``) is the public face, above
everything; no other module sits at its root. The Alembic scripts
(``joulestat.migrations``) read the store's schema, so they sit with the store.

Every import counts: at module level, inside functions (this codebase imports late so
a command pays only for what it uses) and under ``if TYPE_CHECKING:``. Imports by name
at run time (``importlib.import_module``, as ``joulestat.cli.main`` loads its commands)
are not seen.
"""

from __future__ import annotations

import ast
import glob
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Where each installed package's files are in the repository (pyproject's package-dir).
SOURCES = {"joulestat": "agent", "joulestat.dashboard": "dashboard",
           "joulestat.migrations": "migrations"}
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core",)),
    ("devices, host, carbon", ("devices", "host", "carbon")),
    ("attribution", ("attribution",)),
    ("store, outputs, api, reports", ("store", "outputs", "api", "reports", "migrations")),
    ("runtime", ("runtime",)),
    ("cli, client, dashboard", ("cli", "client", "dashboard")),
    ("integrations", ("integrations",)),
)
FACE = len(LAYERS)  # the joulestat package itself: above every layer


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: str
    line: int


def find_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the installed namespace, by dotted name, from its source folder."""
    modules: dict[str, Path] = {}
    for package, folder in sorted(SOURCES.items(), key=lambda kv: kv[0].count(".")):
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (``joulestat.<dir>...``); FACE for the package itself;
    None for a module at the package's root or in a directory that is no layer."""
    parts = module.split(".")
    if parts[0] != "joulestat":
        return None
    if len(parts) == 1 or parts[1] == "__main__":
        return FACE
    for index, (_name, directories) in enumerate(LAYERS):
        if parts[1] in directories:
            return index
    return None


def imports_of(name: str, path: Path, root: Path) -> list[Import]:
    """What module ``name`` imports of ``joulestat`` or of the repository's folder names
    (``agent``, ``dashboard``, ``migrations``: never installed, so such an import is a
    bug), wherever the import statement is."""
    found = []
    where = str(path.relative_to(root))
    own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    watched = ("joulestat", *{folder for folder in SOURCES.values()})
    for node in ast.walk(ast.parse(path.read_text(), filename=where)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..store import y
                base = own_package.split(".")
                base = base[:len(base) - (node.level - 1)]
                targets = [".".join(base + ([node.module] if node.module else []))]
            else:
                targets = [node.module or ""]
        for target in targets:
            if target.split(".")[0] in watched:
                found.append(Import(name, target, where, node.lineno))
    return sorted(set(found), key=lambda imp: (imp.line, imp.imported))


def check_layers(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(modules outside any layer, upward or uninstalled imports), as lines to act on."""
    modules = find_modules(root)
    unplaced = sorted(f"{path.relative_to(root)}: {name} is in no layer directory"
                      for name, path in modules.items() if layer_of(name) is None)
    bad: list[str] = []
    for name, path in modules.items():
        low = layer_of(name)
        if low is None:
            continue
        for imp in imports_of(name, path, root):
            high = layer_of(imp.imported)
            where = f"{imp.path}:{imp.line}"
            if not imp.imported.startswith("joulestat"):
                bad.append(f"{where}: {name} imports {imp.imported}, which is not installed "
                           "(the package is joulestat)")
            elif high is None:
                bad.append(f"{where}: {name} imports {imp.imported}, in no layer")
            elif high > low:
                bad.append(f"{where}: {name} ({_name(low)}) imports {imp.imported} "
                           f"({_name(high)})")
    return unplaced, sorted(bad)


def _name(layer: int) -> str:
    return "the joulestat package" if layer == FACE else LAYERS[layer][0]


def test_every_module_sits_in_a_layer_directory() -> None:
    unplaced, _ = check_layers()
    assert not unplaced, "move these into a layer's directory:\n" + "\n".join(unplaced)


def test_no_upward_imports() -> None:
    _, bad = check_layers()
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_rule_covers_the_tree_it_checks() -> None:
    modules = find_modules()
    assert len(modules) > 100
    assert {"joulestat.devices.rapl", "joulestat.store.engine", "joulestat.cli.main",
            "joulestat.dashboard.app", "joulestat.migrations.env"} <= set(modules)
    used = {name.split(".")[1] for name in modules if "." in name} - {"__main__"}
    declared = {d for _name, directories in LAYERS for d in directories}
    assert used == declared, "a layer directory with no module, or the reverse"


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_reports_an_upward_import(tmp_path: Path) -> None:
    _write(tmp_path, {
        "agent/__init__.py": "",
        "agent/core/__init__.py": "",
        "agent/core/errors.py": "class ConfigError(ValueError):\n    pass\n",
        "agent/runtime/__init__.py": "",
        "agent/runtime/settings.py": "from joulestat.core.errors import ConfigError\n",
        "agent/cli/__init__.py": "",
        "agent/cli/main.py": "import joulestat.runtime.settings\n",
        "agent/devices/__init__.py": "",
        # the upward imports: at the top, late inside a function, relative, type-only,
        # the package's face, and a folder name that is never installed
        "agent/devices/factory.py": (
            "from typing import TYPE_CHECKING\n"
            "from joulestat.core.errors import ConfigError\n"
            "from joulestat.runtime.settings import OPTIONS\n"
            "\n"
            "def build():\n"
            "    from joulestat.cli import main\n"
            "    from ..runtime import settings\n"
            "    import joulestat\n"
            "\n"
            "if TYPE_CHECKING:\n"
            "    from joulestat.store.engine import Engine\n"
            "from agent.core import errors\n"
        ),
        "agent/store/__init__.py": "",
        "agent/store/engine.py": "from joulestat.devices.factory import build\n",  # down
        "dashboard/__init__.py": "",
        "dashboard/app.py": "from joulestat.store import engine\n",
    })
    unplaced, bad = check_layers(tmp_path)
    assert unplaced == []
    assert bad == [
        "agent/devices/factory.py:11: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat.store.engine (store, outputs, api, reports)",
        "agent/devices/factory.py:12: joulestat.devices.factory imports agent.core, which is "
        "not installed (the package is joulestat)",
        "agent/devices/factory.py:3: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat.runtime.settings (runtime)",
        "agent/devices/factory.py:6: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat.cli (cli, client, dashboard)",
        "agent/devices/factory.py:7: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat.runtime (runtime)",
        "agent/devices/factory.py:8: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat (the joulestat package)",
    ]


def test_the_checker_reports_a_module_at_the_root(tmp_path: Path) -> None:
    _write(tmp_path, {"agent/__init__.py": "", "agent/newthing.py": "",
                      "agent/misc/__init__.py": ""})
    unplaced, _bad = check_layers(tmp_path)
    assert unplaced == [
        "agent/misc/__init__.py: joulestat.misc is in no layer directory",
        "agent/newthing.py: joulestat.newthing is in no layer directory",
    ]


def test_docs_architecture_shows_these_layers_and_names_only_real_paths() -> None:
    """docs/architecture.md draws the layers for a newcomer: the same layers in the same
    order, and every path it names exists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d)\. ([^|]+?) \|", text, flags=re.MULTILINE)
    assert [(int(n), name.strip()) for n, name in rows] == [
        (i, name) for i, (name, _) in enumerate(LAYERS)]
    paths = set(re.findall(r"`((?:agent|dashboard|migrations|tests)/[\w/.]*)`", text))
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists()
                     and not glob.glob(str(ROOT / p)))
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"
