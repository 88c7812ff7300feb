"""The test suite's own layout. Its tiers keep their shape: tests/ holds the three tiers
(unit/, store/, system/) and what they share (helpers/, fakes/, fixtures/), nothing else;
tests/unit/ mirrors the package, each folder naming a package directory of joulestat
(agent/<name>/, dashboard/) except project/ (tests of the repository itself), every
folder importable (an ``__init__.py``), and no test module loose in tests/unit/ itself.
And what several test modules share lives in tests/helpers/, tests/fakes/ or a
conftest.py, never in another test module (importing one runs its module-level code, and
pytest may collect its tests twice under the importer's name)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent
TIERS = frozenset({"unit", "store", "system"})
SHARED = frozenset({"helpers", "fakes", "fixtures"})
# tests/unit/ folders that test the repository (layers, packaging, deploy/, docs), no module.
NOT_A_PACKAGE = frozenset({"project"})
UNIT_FILES = frozenset({"__init__.py", "conftest.py"})
PACKAGE_DIR: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(
    encoding="utf-8"))["tool"]["setuptools"]["package-dir"]


def package_folder(root: Path, package: str, package_dir: dict[str, str]) -> Path | None:
    """Where ``package`` (dotted) lives under ``root`` by pyproject's package-dir mapping
    (joulestat -> agent/, joulestat.dashboard -> dashboard/), if it is a directory."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        mapped = package_dir.get(".".join(parts[:cut]))
        if mapped is not None:
            folder = root / mapped / Path(*parts[cut:])
            return folder if folder.is_dir() else None
    return None


def _folders(top: Path) -> list[Path]:
    """The folders under ``top``, caches and hidden ones left out."""
    return sorted(p for p in top.rglob("*") if p.is_dir() and not any(
        part == "__pycache__" or part.startswith(".") for part in p.relative_to(top).parts))


def layout_problems(tests: Path, root: Path, package_dir: dict[str, str]) -> list[str]:
    """What breaks the tiers' shape in the suite at ``tests`` for the tree at ``root``."""
    problems = []
    top = {p.name for p in tests.iterdir()
           if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")}
    problems += [f"tests/{name}/: not a tier nor shared by them" for name in
                 sorted(top - TIERS - SHARED)]
    problems += [f"tests/{name}/: missing" for name in sorted(TIERS - top)]
    unit = tests / "unit"
    if not unit.is_dir():
        return problems
    problems += [f"tests/unit/{p.name}: a file loose in tests/unit/ (put it in the folder "
                 "of the module it tests)" for p in sorted(unit.iterdir())
                 if p.is_file() and p.name not in UNIT_FILES]
    for folder in _folders(unit):
        relative = folder.relative_to(unit)
        shown = f"tests/unit/{relative.as_posix()}/"
        if not (folder / "__init__.py").is_file():
            problems.append(f"{shown}: no __init__.py")
        if relative.parts[0] in NOT_A_PACKAGE:
            continue
        package = ".".join(["joulestat", *relative.parts])
        if package_folder(root, package, package_dir) is None:
            problems.append(f"{shown}: {package} is no package directory of joulestat")
    return problems


def test_the_tiers_hold_their_shape() -> None:
    assert layout_problems(TESTS, ROOT, PACKAGE_DIR) == []


def test_the_shape_check_catches_what_breaks_it(tmp_path: Path) -> None:
    """The check above is not vacuous: a stray tier, a loose test module, a folder
    naming no package, and a folder without __init__.py are each reported."""
    root = tmp_path / "repo"
    for folder in ("agent/host", "agent/reports/compare", "dashboard"):
        (root / folder).mkdir(parents=True)
    tests = root / "tests"
    for folder in ("unit/host", "unit/reports", "unit/reports/compare", "unit/dashboard",
                   "unit/project", "store", "system", "helpers", "integration", "unit/hosts",
                   "unit/reports/nothing"):
        (tests / folder).mkdir(parents=True)
        (tests / folder / "__init__.py").write_text("")
    (tests / "unit" / "__init__.py").write_text("")
    (tests / "unit" / "conftest.py").write_text("")
    (tests / "unit" / "test_stray.py").write_text("")
    (tests / "unit" / "host" / "__init__.py").unlink()
    mapping = {"joulestat": "agent", "joulestat.dashboard": "dashboard"}
    assert layout_problems(tests, root, mapping) == [
        "tests/integration/: not a tier nor shared by them",
        "tests/unit/test_stray.py: a file loose in tests/unit/ (put it in the folder of the "
        "module it tests)",
        "tests/unit/host/: no __init__.py",
        "tests/unit/hosts/: joulestat.hosts is no package directory of joulestat",
        "tests/unit/reports/nothing/: joulestat.reports.nothing is no package directory of "
        "joulestat",
    ]


def is_test_module(name: str, relative: bool = False) -> bool:
    parts = name.lstrip(".").split(".")
    return (relative or parts[0] == "tests") and any(p.startswith("test_") for p in parts)


def imported_test_modules(path: Path) -> list[str]:
    """The ``test_*`` modules ``path`` imports, at any depth in the file, as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            relative = node.level > 0
            if is_test_module(base, relative):
                found.append(base)
            else:  # from tests.unit import test_x
                sep = "" if base.endswith(".") else "."
                found += [f"{base}{sep}{alias.name}" for alias in node.names
                          if is_test_module(f"{base}{sep}{alias.name}", relative)]
    return found


def test_no_module_under_tests_imports_a_test_module() -> None:
    offenders = {str(path.relative_to(TESTS.parent)): names
                 for path in sorted(TESTS.rglob("*.py"))
                 if (names := imported_test_modules(path))}
    assert offenders == {}, "move what is shared to tests/helpers/ (or a conftest.py)"


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import tests.unit.test_a\n"
        "from tests.unit.test_b import x\n"
        "from tests.unit import test_c, helper\n"
        "from .test_d import y\n"
        "def f():\n    from tests.integration.test_e import z\n"
        "from tests.helpers.report_store import T0\n"
        "import pytest\n")
    found = imported_test_modules(sample)
    assert found == ["tests.unit.test_a", "tests.unit.test_b", "tests.unit.test_c",
                     ".test_d", "tests.integration.test_e"]
