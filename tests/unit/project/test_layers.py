"""A module's directory is its layer, and a module imports only from its own layer or
the ones below it; and no two modules import each other, however indirectly.

The layers, lowest first, are the pipeline's stages (docs/architecture.md draws them)::

    0. core                          records that cross layers, units, errors, logging
    1. devices, host, carbon         hardware, /proc, cgroups and schedulers, the node's facts
    2. attribution                   a tick's energy divided among jobs
    3. pipeline                      sampler, pipeline, tick loop, the Sink protocol
    4. store                         write, derive, read (and its migrations)
    5. reports                       figures, comparisons and reports read from the store
    6. api, outputs                  the job API; Prometheus, OTLP (neither imports the other)
    7. runtime                       what puts the layers below together
    8. client, demo, dashboard       what a person imports or looks at
    9. integrations                  the client inside ML frameworks
   10. cli                           the commands, over everything (`joulestat run`
                                     gives trackers their final figures)

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
    ("pipeline", ("pipeline",)),
    ("store", ("store", "migrations")),
    ("reports", ("reports",)),
    ("api, outputs", ("api", "outputs")),
    ("runtime", ("runtime",)),
    ("client, demo, dashboard", ("client", "demo", "dashboard")),
    ("integrations", ("integrations",)),
    ("cli", ("cli",)),
)
# Within a layer, these directories may not import each other: the job API and the
# exporters are two servers side by side (their HTTP admission is core's).
APART = (("api", "outputs"), ("outputs", "api"))
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
            elif (name.split(".")[1:2] + imp.imported.split(".")[1:2]) in map(list, APART):
                bad.append(f"{where}: {name} imports {imp.imported}: "
                           f"{name.split('.')[1]} and {imp.imported.split('.')[1]} stay apart")
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
        "imports joulestat.store.engine (store)",
        "agent/devices/factory.py:12: joulestat.devices.factory imports agent.core, which is "
        "not installed (the package is joulestat)",
        "agent/devices/factory.py:3: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat.runtime.settings (runtime)",
        "agent/devices/factory.py:6: joulestat.devices.factory (devices, host, carbon) "
        "imports joulestat.cli (cli)",
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
    rows = re.findall(r"^\| (\d+)\. ([^|]+?) \|", text, flags=re.MULTILINE)
    assert [(int(n), name.strip()) for n, name in rows] == [
        (i, name) for i, (name, _) in enumerate(LAYERS)]
    paths = set(re.findall(r"`((?:agent|dashboard|migrations|tests)/[\w/.]*)`", text))
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists()
                     and not glob.glob(str(ROOT / p)))
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


# -- No import cycles ------------------------------------------------------------------

def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules it imports (anywhere in it, type-only included), resolved
    to modules of the tree: ``from joulestat.store import engine`` is an import of
    ``joulestat.store.engine``. A module's import of its own package is left out: the
    package's ``__init__`` runs first anyway and holds no imports of its modules."""
    modules = find_modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in modules.items():
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = own.split(".")
                    module = ".".join(base[:len(base) - (node.level - 1)]
                                      + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            for target in targets:
                found = resolve(target) if target.startswith("joulestat") else None
                if found and found != name and not name.startswith(found + "."):
                    graph[name].add(found)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative): each is a set of modules that import each other, however indirectly."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return sorted(cycles)


def test_the_store_holds_records_not_the_registrys_jobs() -> None:
    """The store is handed core records (a job's :class:`JobRecord`, ids of finished
    jobs) and gives them back, so nothing in it imports attribution's live registry:
    a write never reads or changes a job a tick or a request is changing (issue 45)."""
    graph = import_graph()
    store = sorted(name for name in graph if name.split(".")[1:2] in (["store"], ["migrations"]))
    assert len(store) > 10
    found = [name for name in store if "joulestat.attribution.registry" in graph[name]]
    assert found == [], f"import joulestat.attribution.registry: {found}"


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    cycles = import_cycles(graph)
    said = ["; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c)
            for c in cycles]
    assert not cycles, "modules that import each other:\n" + "\n".join(said)


def test_the_checker_finds_an_indirect_cycle(tmp_path: Path) -> None:
    _write(tmp_path, {
        "agent/__init__.py": "",
        "agent/store/__init__.py": "",
        "agent/store/a.py": "from joulestat.store import b\n",
        "agent/store/b.py": "def f():\n    from joulestat.store.c import x\n",
        "agent/store/c.py": ("from typing import TYPE_CHECKING\n"
                             "if TYPE_CHECKING:\n    from joulestat.store.a import y\n"),
        "agent/store/d.py": "import joulestat.store.a\n",  # imports into it: no cycle
    })
    assert import_cycles(import_graph(tmp_path)) == [
        ["joulestat.store.a", "joulestat.store.b", "joulestat.store.c"]]
