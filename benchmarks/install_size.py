"""What `pip install joulestat` (the base install, no extras) puts on a machine, before
and after a change: for a training image that only wants ``track()``, every megabyte
and every distribution is the user's to carry.

One run makes two fresh venvs (no pip, no system site-packages) and installs into each,
non-editable, the tree at a git revision (default ``7e9c7bd``: before issue 22 split the
dependencies into extras) and the current tree (the files git tracks, as they are now).
Both resolve with this tree's ``constraints.txt`` (``--no-constraints``: newest within
each tree's ranges), so a package both need is the same version in both and the
difference is what each asks for. For each it prints: MB on disk of the venv's
site-packages (as ``du`` counts, without pip and setuptools), the number of
distributions installed (joulestat included) and whether the heavy ones are there.

    .venv/bin/python benchmarks/install_size.py               # ~3 min on 2 cores, pip cache warm
    .venv/bin/python benchmarks/install_size.py --old HEAD~3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OLD = "7e9c7bd"
# Distributions whose presence the report states (the list, and numpy/torch).
WATCHED = ("codecarbon", "streamlit", "pandas", "pyarrow", "psycopg", "reportlab", "numpy",
           "nvidia-ml-py", "psutil")
NOT_COUNTED = {"pip", "setuptools", "wheel"}  # tooling, not what joulestat brings

DISTRIBUTIONS = """
import importlib.metadata as m, json, sysconfig
names = sorted({d.metadata["Name"].lower().replace("_", "-") for d in m.distributions()})
print(json.dumps({"site": sysconfig.get_path("purelib"), "names": names}))
"""


@dataclass(frozen=True)
class Install:
    label: str
    source: str
    site_packages_mb: float
    distributions: int
    present: dict[str, bool]
    names: list[str]


def tree_at(revision: str, into: Path) -> Path:
    """``git archive`` of ``revision``: a clean checkout, nothing untracked."""
    archive = into.with_suffix(".tar")
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", revision],
                       stdout=fh, check=True)
    into.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def current_tree(into: Path) -> Path:
    """The files git tracks, with their contents in the worktree now."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "-z"],
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


def du_bytes(path: Path, skip: set[str]) -> int:
    """Bytes on disk under ``path`` (512-byte blocks, as du), top-level entries whose
    distribution name is in ``skip`` left out."""
    total = 0
    for entry in path.iterdir():
        name = entry.name.split("-")[0].lower().replace("_", "-")
        if name in skip or entry.name in ("_distutils_hack", "distutils-precedence.pth"):
            continue
        paths = [entry] if not entry.is_dir() or entry.is_symlink() else [
            entry, *entry.rglob("*")]
        total += sum(p.lstat().st_blocks * 512 for p in paths)
    return total


def install(label: str, source: Path, venv: Path, constraints: Path | None) -> Install:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    command = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
               "--no-warn-script-location"]
    if constraints is not None:
        command += ["-c", str(constraints)]
    built = subprocess.run([*command, str(source)], capture_output=True, text=True)
    if built.returncode != 0:  # the build's own warnings are noise unless it failed
        sys.stderr.write(built.stdout + built.stderr)
        built.check_returncode()
    found = json.loads(subprocess.run([str(python), "-c", DISTRIBUTIONS], check=True,
                                      capture_output=True, text=True).stdout)
    names = [n for n in found["names"] if n not in NOT_COUNTED]
    size = du_bytes(Path(found["site"]), NOT_COUNTED)
    return Install(label, str(source), round(size / 1e6, 1), len(names),
                   {w: w in names for w in WATCHED}, names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", default=DEFAULT_OLD,
                        help=f"git revision to compare with [default: {DEFAULT_OLD}]")
    parser.add_argument("--no-constraints", action="store_true",
                        help="resolve the newest releases within each tree's ranges")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the venvs (path printed)")
    args = parser.parse_args(argv)
    constraints = None if args.no_constraints else REPO / "constraints.txt"
    work = Path(tempfile.mkdtemp(prefix="joulestat-install-size-"))
    try:
        old_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.old],
                                 capture_output=True, text=True, check=True).stdout.strip()
        results = [
            install(f"{old_rev} (--old)", tree_at(args.old, work / "old-src"),
                    work / "old-venv", constraints),
            install("current tree", current_tree(work / "new-src"), work / "new-venv",
                    constraints),
        ]
    finally:
        if args.keep:
            print(f"venvs kept under {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
        return 0
    print(f"base install (pip install joulestat, no extras), Python "
          f"{sys.version_info.major}.{sys.version_info.minor}, "
          f"{'constraints.txt' if constraints else 'newest within ranges'}")
    header = f"{'tree':<22}{'site-packages MB':>18}{'distributions':>15}  " + "  ".join(WATCHED)
    print(header)
    for r in results:
        marks = "  ".join(f"{'yes' if r.present[w] else 'no':<{len(w)}}" for w in WATCHED)
        print(f"{r.label:<22}{r.site_packages_mb:>18.1f}{r.distributions:>15}  {marks}")
    old, new = results
    print(f"difference: {old.site_packages_mb - new.site_packages_mb:.1f} MB and "
          f"{old.distributions - new.distributions} distributions fewer; current tree "
          f"installs: {', '.join(new.names)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
