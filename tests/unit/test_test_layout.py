"""The test suite's own layout: what several test modules share lives in tests/helpers/,
tests/fakes/ or a conftest.py, never in another test module (importing one runs its
module-level code, and pytest may collect its tests twice under the importer's name)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


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
