"""The wheel as a user meets it: built from a clean copy of the tree, installed (not
editable, base install only) into a fresh venv outside the tree, used from a directory
that is not the repository.

Acceptance 1 and 2 of issue 22: one top-level package (``joulestat``) lands in
site-packages; ``db upgrade``, an embedded ``run``, ``jobs``, ``report --format html``,
``from joulestat import track, count`` and ``python -m joulestat --help`` work; a user
project with its own ``agent`` and ``dashboard`` packages imports them next to
joulestat. The base install also answers a command that needs a missing extra with one
line naming it (dashboard, postgres, pdf, demo, hf). The copy holds the files git tracks, as
they are now: an untracked file in the worktree cannot make the wheel pass or fail.

Cost: one wheel build (setuptools in pip's isolated build env) and a base install of
six small distributions from pip's cache, about 45 s in all on two shared cores; the venv
is made without pip (the suite's own pip installs into it with ``--python``), and being
base-only it also serves the missing-extra checks at no further cost. New files must be
``git add``-ed to be in the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from joulestat.store.migrate import HEAD_REVISION
from tests.helpers.agent_process import free_port

# One worker builds and installs the wheel once for the whole module (pytest-xdist
# --dist loadgroup); on four it was built four times.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_wheel")]

REPO = Path(__file__).resolve().parents[2]
# Source folder -> where its files land in site-packages (pyproject's package-dir).
INSTALLED_AS = {"agent": "joulestat", "dashboard": "joulestat/dashboard",
                "migrations": "joulestat/migrations"}
# What the base install must not bring: the extras' libraries and CodeCarbon.
NOT_IN_BASE = ("codecarbon", "streamlit", "pandas", "pyarrow", "psycopg", "psycopg-binary",
               "reportlab", "numpy", "nvidia-ml-py", "altair", "psutil")


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    site_packages: Path
    work: Path  # a directory outside the repository, where the commands run
    env: dict[str, str]

    def run(self, *argv: str, cwd: Path | None = None,
            timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=cwd or self.work, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


def tracked_files() -> list[str]:
    """The files of a clean checkout: what git tracks (as in the worktree now)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "-z"], cwd=REPO, check=True,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell tracked files from untracked ones")
    return [name for name in out.split("\0") if name and (REPO / name).is_file()]


def clean_copy(files: list[str], into: Path) -> Path:
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return into


def _clean_env(venv: Path, home: Path) -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JOULESTAT_") and k not in drop}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    env["XDG_DATA_HOME"] = str(home / "data")
    env["JOULESTAT_CLOUD_METADATA"] = "false"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    files = tracked_files()
    source = clean_copy(files, base / "src")
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(dist), str(source)],
                   check=True, capture_output=True, text=True, timeout=600)
    wheel = next(dist.glob("joulestat-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = venv / "bin" / "python"
    # The base install only, pinned as the suite is (constraints.txt), from pip's cache.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--quiet", "-c", str(REPO / "constraints.txt"), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=600)
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip())
    work = base / "work"
    (work / "sys").mkdir(parents=True)  # an empty sysfs: no RAPL, so the run estimates
    env = _clean_env(venv, base)
    env["JOULESTAT_AGENT_URL"] = f"http://127.0.0.1:{free_port()}"  # nothing listens
    env["JOULESTAT_SYSFS_ROOT"] = str(work / "sys")
    return Installed(venv, wheel, site, work, env)


def record_of(installed: Installed) -> list[str]:
    [dist_info] = installed.site_packages.glob("joulestat-*.dist-info")
    return [line.rsplit(",", 2)[0]
            for line in (dist_info / "RECORD").read_text().splitlines() if line]


def test_the_wheel_installs_one_top_level_package_joulestat(installed: Installed) -> None:
    record = record_of(installed)
    tops = {path.split("/")[0] for path in record
            if not path.startswith("..") and ".dist-info" not in path.split("/")[0]}
    assert tops == {"joulestat"}
    [dist_info] = installed.site_packages.glob("joulestat-*.dist-info")
    top_level = dist_info / "top_level.txt"
    if top_level.exists():  # setuptools writes it; the RECORD is the authority
        assert top_level.read_text().split() == ["joulestat"]
    for name in ("agent", "dashboard", "migrations"):
        assert not (installed.site_packages / name).exists(), name
    # The scripts go to bin/, nothing else outside site-packages.
    outside = [p for p in record if p.startswith("..")]
    assert outside and all(p.endswith("/bin/joulestat") for p in outside), outside


def test_every_tracked_file_of_the_package_folders_is_in_the_wheel(
        installed: Installed) -> None:
    """Modules, migrations, CodeCarbon's data and its licence, the dashboard's pages: the
    wheel carries every file of the three folders (the RECORD lists what it installed)."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    expected = {f"{INSTALLED_AS[name.split('/')[0]]}/{name.split('/', 1)[1]}"
                for name in tracked_files() if name.split("/")[0] in INSTALLED_AS}
    assert len(expected) > 100
    assert sorted(expected - names) == []
    assert "joulestat/data/codecarbon/hardware/cpu_power.csv" in names
    assert "joulestat/migrations/script.py.mako" in names
    assert any(n.endswith(".dist-info/licenses/agent/data/codecarbon/LICENSE") for n in names)


def test_the_base_install_brings_no_extra(installed: Installed) -> None:
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))")
    names = json.loads(installed.run(installed.bin("python"), "-c", code).stdout)
    assert "joulestat" in names
    assert [n for n in names if n in NOT_IN_BASE] == []
    assert len(names) <= 10, names  # joulestat, SQLAlchemy, Alembic and their few deps


def test_store_run_jobs_and_report_work_outside_the_tree(installed: Installed) -> None:
    joulestat = installed.bin("joulestat")
    upgrade = installed.run(joulestat, "db", "upgrade", "--db", "sqlite:///w.db")
    assert upgrade.returncode == 0, upgrade.stderr
    assert HEAD_REVISION in upgrade.stdout and (installed.work / "w.db").is_file()

    code = "import pathlib; pathlib.Path('body.txt').write_text('ran')"
    run = installed.run(joulestat, "run", "--db", "sqlite:///w.db", "--name", "x", "--",
                        installed.bin("python"), "-c", code)
    assert run.returncode == 0, run.stderr
    assert (installed.work / "body.txt").read_text() == "ran"
    assert "measured embedded" in run.stderr

    jobs = installed.run(joulestat, "jobs", "--db", "sqlite:///w.db", "--json")
    assert jobs.returncode == 0, jobs.stderr
    [job] = json.loads(jobs.stdout)
    assert job["name"] == "x" and job["status"] == "ended"
    assert job["total_j"] > 0  # estimated: the sysfs given has no RAPL

    report = installed.run(joulestat, "report", "x", "--db", "sqlite:///w.db",
                           "--format", "html", "-o", "r.html")
    assert report.returncode == 0, report.stderr
    html = (installed.work / "r.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and job["id"] in html


def test_the_library_and_the_module_entry_point(installed: Installed) -> None:
    python = installed.bin("python")
    code = ("import sys, joulestat; from joulestat import track, count; "
            "print(joulestat.__file__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('sqlalchemy', 'alembic', 'prometheus_client')))")
    result = installed.run(python, "-c", code)
    assert result.returncode == 0, result.stderr
    where, third_party = result.stdout.splitlines()
    assert Path(where).is_relative_to(installed.site_packages)
    assert third_party == "[]"  # import joulestat is stdlib-only
    helped = installed.run(python, "-m", "joulestat", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "db" in helped.stdout and "dashboard" in helped.stdout


def test_a_project_with_its_own_agent_and_dashboard_packages(installed: Installed,
                                                             tmp_path: Path) -> None:
    """Reinforcement-learning code has an ``agent`` package everywhere: it and joulestat
    import side by side, each its own."""
    project = tmp_path / "project"
    for name in ("agent", "dashboard"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(f"WHOSE = 'user {name}'\n")
    code = ("import agent, dashboard, joulestat, joulestat.dashboard\n"
            "from joulestat import track, count\n"
            "print(agent.WHOSE, '|', dashboard.WHOSE, '|', joulestat.__file__, '|', "
            "joulestat.dashboard.__file__)\n")
    result = installed.run(installed.bin("python"), "-c", code, cwd=project)
    assert result.returncode == 0, result.stderr
    mine, theirs, ours, ours_dashboard = (p.strip() for p in result.stdout.split("|"))
    assert (mine, theirs) == ("user agent", "user dashboard")
    assert Path(ours).is_relative_to(installed.site_packages)
    assert Path(ours_dashboard).is_relative_to(installed.site_packages)


@pytest.mark.parametrize("argv, extra", [
    (("dashboard", "--db", "sqlite:///w.db"), "dashboard"),
    (("jobs", "--db", "postgresql+psycopg://me:s3cret@127.0.0.1:1/js"), "postgres"),
    (("report", "x", "--db", "sqlite:///w.db", "--format", "pdf", "-o", "r.pdf"), "pdf"),
    (("demo", "--seconds", "1", "--backend", "numpy"), "demo"),
    (("demo", "--llm", "--db", "sqlite:///w.db"), "hf"),
])
def test_a_missing_extra_is_one_line_naming_it(installed: Installed, argv: tuple[str, ...],
                                               extra: str) -> None:
    result = installed.run(installed.bin("joulestat"), *argv)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"pip install 'joulestat[{extra}]'" in lines[0]
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr
    assert not (installed.work / "r.pdf").exists()
