"""``joulestat report`` and ``joulestat import`` where a process is what is tested: a PDF
is never written to a real terminal (a pseudo-terminal as the command's stdout); an
import into a store that does not exist yet creates it (its schema in a child
``joulestat db upgrade``); and a CodeCarbon file made by CodeCarbon itself (run as its
own process) imports with its figures. Every other report and import test runs the
command in process: tests/unit/cli/test_report.py and test_import.py."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from joulestat.core import units
from joulestat.store.migrate import HEAD_REVISION
from tests.helpers.agent_process import JOULESTAT, agent_env
from tests.helpers.cli import cli_env, invoke
from tests.helpers.codecarbon_run import codecarbon_script
from tests.helpers.report_checks import SCHEMA, SCHEMA_2, html_text, report_ok
from tests.helpers.report_store import fill_store, new_store


def test_pdf_is_not_written_to_a_terminal(tmp_path: Path) -> None:
    """A terminal is a property of the process's stdout: the command runs as a process
    with a pseudo-terminal there. (Piped, it writes the PDF: tests/unit/cli/test_report.py.)"""
    path = tmp_path / "measured.db"
    engine = new_store(path)
    fill_store(engine)
    engine.dispose()
    env = agent_env(JOULESTAT_DB=f"sqlite:///{path}")
    main, secondary = pty.openpty()
    try:
        proc = subprocess.run([JOULESTAT, "report", "dist-1", "--format", "pdf"], env=env,
                              stdout=secondary, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(secondary)
        os.close(main)
    assert proc.returncode == 2 and "-o FILE" in proc.stderr


def test_an_import_creates_the_store_it_writes_to(tmp_path: Path) -> None:
    """A writer makes the schema of a new store out of process (a child ``joulestat db
    upgrade``, agent/store/engine.py), so this import runs as the user's process does,
    in a process of its own; the store it made reads as any other."""
    path = tmp_path / "target.db"
    env = agent_env(JOULESTAT_DB=f"sqlite:///{path}")
    result = subprocess.run([JOULESTAT, "import", str(SCHEMA_2)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "1 job(s), 2 node part(s) written: dist-1" in result.stdout, result.stdout
    current = invoke("db", "current", env=cli_env(JOULESTAT_DB=f"sqlite:///{path}"))
    assert current.returncode == 0 and HEAD_REVISION in current.stdout, current
    assert json.loads(report_ok(env, "dist-1").stdout)["job"]["id"] == "dist-1"


CODECARBON_RUN = codecarbon_script("busy-loop", seconds=3)


@pytest.mark.slow
def test_codecarbon_file_made_by_codecarbon(tmp_path: Path) -> None:
    """CodeCarbon runs as its own process (its tracker's threads and files); the import
    and reports of what it wrote run in this process."""
    run = subprocess.run([sys.executable, "-c", CODECARBON_RUN], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**agent_env(), "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    emissions = tmp_path / "emissions.csv"
    [row] = list(csv.DictReader(io.StringIO(emissions.read_text())))
    env = cli_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    result = invoke("import", str(emissions), env=env)
    assert result.returncode == 0, result.stderr
    job_id = f"codecarbon:{row['run_id']}"
    data = json.loads(report_ok(env, job_id).stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    pue = float(row["pue"])
    for column, component in (("cpu_energy", "cpu"), ("gpu_energy", "accelerator"),
                              ("ram_energy", "dram")):
        expected_j = float(row[column]) * 3_600_000 / pue
        assert data["energy_j"][component] == pytest.approx(expected_j, rel=1e-12), column
    assert data["energy_j"]["total"] == pytest.approx(
        float(row["energy_consumed"]) * 3_600_000 / pue, rel=1e-9)
    assert data["energy_j"]["cpu"] > 0
    assert data["job"]["name"] == "codecarbon:busy-loop"
    assert data["job"]["duration_s"] == pytest.approx(float(row["duration"]))
    [provenance] = data["provenance"]
    assert (provenance["region"], provenance["intensity_level"]) == ("FRA", "country")
    assert provenance["intensity_source"] == "codecarbon:energy-mix:FRA"
    # what CodeCarbon measured with, as far as its CSV says: CPU not stated, RAM a model
    assert data["sources"]["cpu"] == ["import:codecarbon"]
    assert data["sources"]["dram"] == ["import:codecarbon/model:codecarbon-ram"]
    # CodeCarbon's own CO2e is kept beside joulestat's recomputation, both named
    [external] = data["external_co2e"]
    assert external["co2e_g"] == pytest.approx(float(row["emissions"]) * 1000, rel=1e-12)
    assert external["tool"] == "CodeCarbon" and external["version"] == row["codecarbon_version"]
    own = units.mass(external["co2e_g"])
    assert any(note.startswith(f"CodeCarbon {row['codecarbon_version']}'s own CO2e is {own}")
               and f"joulestat recomputed {units.mass(data['co2e_g'])}" in note
               for note in data["notes"]), data["notes"]
    page = html_text(report_ok(env, job_id, "--format", "html").stdout).text
    # "17.4 mg over 550 mWh (joulestat's: ...)": its figure, the energy it applied it to
    assert f"CodeCarbon's own CO2e {own} over " in page
    assert f"(joulestat's: {units.mass(data['co2e_g'])}" in page
    again = invoke("import", str(emissions), env=env)
    assert "1 job(s) unchanged" in again.stdout, again.stdout
    # CodeCarbon's naive local timestamp is the run's end, read in local time
    assert abs(data["job"]["ended_s"] - time.time()) < 300
