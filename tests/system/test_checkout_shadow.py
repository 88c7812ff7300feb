"""Issue 46: a checkout named joulestat does not shadow the package. From the clone's
parent directory Python takes the folder ``joulestat`` for a namespace package, ahead
of an editable install's import hook; the Makefile's installs are strict editable ones
(a tree of links on sys.path), which a namespace folder cannot shadow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.browser import chromium, serve
from tests.helpers.dashboard_app import sample_store_url

ROOT = Path(__file__).resolve().parents[2]


def _parent_of_a_checkout_named_joulestat(tmp_path: Path) -> Path:
    parent = tmp_path / "clones"
    parent.mkdir()
    (parent / "joulestat").symlink_to(ROOT, target_is_directory=True)
    return parent


def test_import_from_the_checkouts_parent_gets_the_package(tmp_path: Path) -> None:
    parent = _parent_of_a_checkout_named_joulestat(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", "import joulestat; from joulestat import track, count; "
         "from joulestat.carbon.codecarbon_data import load_grid_data; load_grid_data(); "
         "print(joulestat.__file__)"],
        cwd=parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("__init__.py")


def test_the_dashboard_from_the_checkouts_parent_shows_its_pages(tmp_path: Path) -> None:
    parent = _parent_of_a_checkout_named_joulestat(tmp_path)
    url = sample_store_url(tmp_path)
    with serve(url, cwd=parent) as base, chromium() as browser:
        for path, expected in (("/", ["Overview", "Power now"]),
                               ("/compare", ["Compare", " vs "])):
            text = browser.open(f"{base}{path}", expected)
            assert "Traceback" not in text and "package data" not in text, text[:2000]
