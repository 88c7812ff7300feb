"""The package checks' listing of the tree is git's: the files under the package folders
that tests/unit/project/test_packaging.py holds pyproject to, read from the .gitignore
files in process (tests/helpers/tree_files.py), are exactly those ``git ls-files
--cached --others --exclude-standard`` lists (tracked, and new ones not ignored), so a
wheel built from a commit of the tree is built from what those checks saw."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.helpers.tree_files import files_git_would_list

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                     ["tool"]["setuptools"]["package-dir"].values()))


def test_the_package_folders_list_as_git_lists_them() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout with git installed: nothing to compare with")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *FOLDERS],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=30).stdout
    by_git = sorted(ROOT / line for line in listed.splitlines() if (ROOT / line).is_file())
    by_reader = files_git_would_list(ROOT, FOLDERS)
    assert len(by_git) > 100  # the listing itself worked
    only_git = [str(p.relative_to(ROOT)) for p in sorted(set(by_git) - set(by_reader))]
    only_reader = [str(p.relative_to(ROOT)) for p in sorted(set(by_reader) - set(by_git))]
    assert (only_git, only_reader) == ([], [])
