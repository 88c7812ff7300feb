"""A missing optional library is one line naming the extra; a broken one stays visible.

tests/system/test_wheel.py meets the messages in a real base-only install; these
check the rules behind them in the dev environment, where every extra is installed and
"missing" is made with ``sys.modules[name] = None`` (what an absent module raises).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from joulestat.cli.main import main
from joulestat.core.errors import ConfigError
from joulestat.core.extras import Extra, MissingExtraError, require
from joulestat.store.engine import StoreError, make_engine, open_readonly_engine


def absent(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """``package`` and its submodules as if not installed, whatever an earlier test
    imported (a submodule already in ``sys.modules`` would still import)."""
    for name in [n for n in sys.modules if n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


def test_a_missing_module_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    absent(monkeypatch, "reportlab")
    with pytest.raises(MissingExtraError) as caught:
        require("reportlab.lib.units", Extra.PDF, "a PDF report")
    assert isinstance(caught.value, ConfigError)  # the CLI's exit 2, no traceback
    assert str(caught.value) == "a PDF report needs the pdf extra: pip install 'joulestat[pdf]'"


def test_an_installed_module_failing_on_its_own_import_is_not_hidden(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_extra_lib.py").write_text("import no_such_dependency_of_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_of_it"):
        require("broken_extra_lib", Extra.PDF, "a PDF report")


def test_a_postgresql_url_without_psycopg_names_the_postgres_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    absent(monkeypatch, "psycopg")
    for opener in (make_engine, open_readonly_engine):
        with pytest.raises(StoreError) as caught:
            opener("postgresql+psycopg://me:s3cret@db.example/js")
        message = str(caught.value)
        assert "pip install 'joulestat[postgres]'" in message and "s3cret" not in message


def test_the_cli_prints_one_line_and_exits_2(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    absent(monkeypatch, "reportlab")
    assert main(["report", "x", "--format", "pdf", "-o", "/nonexistent/r.pdf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("joulestat report: ")
    assert err[0].endswith("pip install 'joulestat[pdf]'")
