"""pyproject's package list and package data against the tree, and its requirements.

setuptools' ``package-dir`` mapping (agent/ -> joulestat, ...) cannot be combined with
package discovery, so ``[tool.setuptools] packages`` is a hand list: a new directory with
an ``__init__.py`` that is not on it installs fine in editable mode (which maps folders)
and is missing from the wheel. Likewise a data file that no ``package-data`` glob covers
is read from the tree in development and absent once installed. These checks fail at
once, without building; tests/system/test_wheel.py builds and installs the wheel.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import importlib.util
import re
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from joulestat.carbon import codecarbon_data
from joulestat.devices import cpu_tdp
from tests.helpers.tree_files import files_git_would_list

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]
PACKAGES: list[str] = SETUPTOOLS["packages"]
PACKAGE_DATA: dict[str, list[str]] = SETUPTOOLS["package-data"]

# The six files copied from CodeCarbon 3.3.2 (paths as under codecarbon/data).
CODECARBON_FILES = (
    "hardware/cpu_power.csv",
    "private_infra/global_energy_mix.json",
    "private_infra/2023/usa_emissions.json",
    "private_infra/2023/canada_energy_mix.json",
    "private_infra/carbon_intensity_per_source.json",
    "cloud/impact.csv",
)


def package_folder(package: str) -> Path:
    """Where ``package``'s files are in the tree, by pyproject's package-dir mapping."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        mapped = PACKAGE_DIR.get(".".join(parts[:cut]))
        if mapped is not None:
            return ROOT / mapped / Path(*parts[cut:])
    raise AssertionError(f"{package}: no package-dir entry above it")


def packages_in_tree() -> set[str]:
    """Every directory with an ``__init__.py`` under the mapped folders, as a package."""
    found = set()
    for package, folder in PACKAGE_DIR.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            found.add(".".join([package, *relative.parts]))
    return found


def importable_data_folders(files: list[Path]) -> set[str]:
    """Folders holding files to ship whose dotted name Python could import (every part an
    identifier) but that have no ``__init__.py``: setuptools warns about each one not
    listed ("Package would be ignored"), so they are listed too."""
    found = set()
    for path in files:
        for package, folder in PACKAGE_DIR.items():
            base = ROOT / folder
            if not path.is_relative_to(base):
                continue
            parts = path.parent.relative_to(base).parts
            for cut in range(1, len(parts) + 1):
                if all(p.isidentifier() for p in parts[:cut]):
                    found.add(".".join([package, *parts[:cut]]))
    return found - packages_in_tree()


def files_to_ship() -> list[Path]:
    """The files a wheel built from a commit of this tree would be built from: tracked
    ones and new ones git does not ignore (caches, build output are ignored), read from
    the .gitignore files (tests/helpers/tree_files.py; tests/system/test_packaging_git.py
    checks that git lists the same)."""
    return files_git_would_list(ROOT, sorted(set(PACKAGE_DIR.values())))


def glob_matches(relative: PurePosixPath, pattern: str) -> bool:
    """setuptools' package-data semantics: a glob relative to the package folder, whose
    ``*`` never crosses a ``/``."""
    parts = PurePosixPath(pattern).parts
    return len(parts) == len(relative.parts) and all(
        fnmatch.fnmatchcase(name, part) for name, part in zip(relative.parts, parts, strict=True))


def shipped_by(path: Path) -> str | None:
    """How ``path`` gets into the wheel: "module of P", "data of P", or None."""
    owners = sorted((p for p in PACKAGES if path.is_relative_to(package_folder(p))),
                    key=lambda p: len(package_folder(p).parts), reverse=True)
    if not owners:
        return None
    if path.suffix == ".py" and path.parent == package_folder(owners[0]):
        return f"module of {owners[0]}"
    for package in owners:  # data may be claimed by the package or any above it
        relative = PurePosixPath(path.relative_to(package_folder(package)).as_posix())
        if any(glob_matches(relative, g) for g in PACKAGE_DATA.get(package, [])):
            return f"data of {package}"
    return None


def test_every_package_in_the_tree_is_listed_and_every_listed_one_exists() -> None:
    in_tree = packages_in_tree() | importable_data_folders(files_to_ship())
    listed = set(PACKAGES)
    assert sorted(in_tree - listed) == [], "add these to [tool.setuptools] packages"
    assert sorted(listed - in_tree) == [], "listed packages with no folder (or files) in the tree"
    assert len(PACKAGES) == len(listed), "a package is listed twice"
    assert all(p == "joulestat" or p.startswith("joulestat.") for p in PACKAGES)
    assert {"joulestat.reports.compare", "joulestat.migrations.versions"} <= in_tree


def test_every_file_under_the_package_folders_is_shipped() -> None:
    files = files_to_ship()
    assert len(files) > 100  # the listing itself worked
    unshipped = sorted(str(p.relative_to(ROOT)) for p in files if shipped_by(p) is None)
    assert unshipped == [], "cover these in [tool.setuptools.package-data] (or a package)"


def test_the_data_files_the_code_reads_are_package_data() -> None:
    """The files read at run time, by the paths the readers use, are there and shipped
    as data (not merely present in the tree)."""
    from joulestat.carbon.datafiles import data_path
    from joulestat.store.migrate import migrations_dir

    read = [Path(str(cpu_tdp.bundled_table()))]
    root = Path(str(codecarbon_data.codecarbon_data_root()))
    read += [root / Path(*parts) for parts in (
        codecarbon_data.ENERGY_MIX, codecarbon_data.USA_EMISSIONS, codecarbon_data.CANADA_MIX,
        codecarbon_data.PER_SOURCE, codecarbon_data.GCP_IMPACT)]
    read += [data_path(name) for name in ("instances.csv", "cloud_regions.csv",
                                          "power_models.toml")]
    read += [migrations_dir() / "script.py.mako"]
    read += [root / "LICENSE", root / "README.md"]
    for path in read:
        assert path.is_file(), path
        # resolved: a strict editable install (the Makefile's) reads them through links
        assert (shipped_by(path.resolve()) or "").startswith("data of "), path


def test_the_checks_catch_a_file_outside_the_globs_and_an_unlisted_package() -> None:
    """The two checks above are not vacuous: an unlisted directory's module and a data
    file of an uncovered kind are both reported unshipped."""
    new_folder = ROOT / "agent" / "newlayer" / "thing.py"
    assert shipped_by(new_folder) is None
    assert importable_data_folders([new_folder]) == {"joulestat.newlayer"}
    assert shipped_by(ROOT / "agent" / "core" / "table.csv") is None
    assert shipped_by(ROOT / "agent" / "data" / "notes.md") is None
    assert shipped_by(ROOT / "agent" / "data" / "codecarbon" / "private_infra" / "2024"
                      / "x.json") is None
    assert shipped_by(ROOT / "dashboard" / "pages" / "jobs.py") == \
        "module of joulestat.dashboard.pages"
    assert shipped_by(ROOT / "agent" / "core" / "units.py") == "module of joulestat.core"


def test_the_listing_leaves_out_what_gitignore_files_ignore(tmp_path: Path) -> None:
    """files_to_ship()'s reader on a small tree: ignored folders are not entered,
    anchored patterns apply from their own .gitignore's folder only, a folder's
    .gitignore reaches its subfolders and not its siblings, and a form it cannot read is
    refused rather than guessed at."""
    (tmp_path / ".gitignore").write_text("# caches\n__pycache__/\n*.egg-info/\n/build/\n*.pyc\n")
    for name in ("pkg/a.py", "pkg/__pycache__/a.cpython-311.pyc", "pkg/b.pyc",
                 "pkg/x.egg-info/PKG-INFO", "pkg/build/kept.py", "build/gone.py",
                 "pkg/sub/.gitignore", "pkg/sub/secret.env", "pkg/sub/deep/secret.env",
                 "pkg/other/secret.env"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "pkg" / "sub" / ".gitignore").write_text("secret.env\n")
    listed = [p.relative_to(tmp_path).as_posix()
              for p in files_git_would_list(tmp_path, ["pkg", "build"])]
    assert listed == ["pkg/a.py", "pkg/build/kept.py", "pkg/other/secret.env",
                      "pkg/sub/.gitignore"]
    (tmp_path / ".gitignore").write_text("!keep.pyc\n")
    with pytest.raises(ValueError, match="does not take"):
        files_git_would_list(tmp_path, ["pkg"])


def test_install_requirements_pin_no_exact_version() -> None:
    """A user's environment must be able to hold joulestat next to its own libraries
    (its own CodeCarbon, its own SQLAlchemy within range): no == or === anywhere."""
    project = PYPROJECT["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    pinned = [r for r in requirements if re.search(r"===?", r)]
    assert pinned == []


def test_base_install_needs_neither_codecarbon_nor_the_extras() -> None:
    base = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    for name in ("codecarbon", "streamlit", "pandas", "psycopg", "reportlab", "nvidia-ml-py"):
        assert name not in base, name
    extras = PYPROJECT["project"]["optional-dependencies"]
    # dev pulls every extra the suite exercises; each extra a message names exists.
    from joulestat.core.extras import Extra

    assert {e.value for e in Extra} <= set(extras)
    assert any(r.startswith("joulestat[") and all(
        x in r for x in ("dashboard", "postgres", "pdf", "nvidia")) for r in extras["dev"])


@pytest.mark.skipif(importlib.util.find_spec("codecarbon") is None,
                    reason="codecarbon (dev extra) is not installed")
def test_codecarbon_copies_are_the_release_they_name() -> None:
    """agent/data/codecarbon/README.md says the files are 3.3.2's, unchanged."""
    version = importlib.metadata.version("codecarbon")
    if version != codecarbon_data.CODECARBON_VERSION:
        pytest.skip(f"codecarbon {version} installed, the copies are "
                    f"{codecarbon_data.CODECARBON_VERSION}'s")
    spec = importlib.util.find_spec("codecarbon")
    assert spec is not None and spec.submodule_search_locations
    upstream = Path(list(spec.submodule_search_locations)[0]) / "data"
    ours = ROOT / "agent" / "data" / "codecarbon"
    for name in CODECARBON_FILES:
        assert hashlib.sha256((ours / name).read_bytes()).hexdigest() == \
            hashlib.sha256((upstream / name).read_bytes()).hexdigest(), name
    assert (ours / "LICENSE").read_text().startswith("MIT License")
    readme = (ours / "README.md").read_text()
    assert "3.3.2" in readme and "github.com/mlco2/codecarbon" in readme
    assert all(name in readme for name in CODECARBON_FILES)
