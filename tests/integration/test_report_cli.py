"""``joulestat report`` and ``joulestat import`` as a user runs them: the real CLI in a
subprocess, on stores filled through the store API, and a CodeCarbon file made by
CodeCarbon itself."""

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
from typing import Any

import jsonschema
import pytest
from pypdf import PdfReader

from joulestat.core import units
from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter
from tests.helpers.agent_process import JOULESTAT, agent_env, run_cli
from tests.helpers.codecarbon_run import codecarbon_script
from tests.helpers.report_checks import (
    SCHEMA,
    assert_same_figures,
    html_text,
    renamed,
    validate,
)
from tests.helpers.report_store import (
    LOADER,
    T0,
    fill_store,
    job_energy,
    make_job,
    new_store,
    node_devices,
)

ENDED = ("dist-1", "secretive")


@pytest.fixture
def store(tmp_path: Path) -> tuple[dict[str, str], Any]:
    """A filled store and the environment that points the CLI at it."""
    path = tmp_path / "measured.db"
    totals = fill_store(new_store(path))
    return agent_env(JOULESTAT_DB=f"sqlite:///{path}"), totals


def report(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    result = run_cli("report", *args, env=env)
    assert result.returncode == 0, result.stderr
    return result


def test_every_format_from_the_cli(store: tuple[dict[str, str], Any], tmp_path: Path) -> None:
    env, totals = store
    data = json.loads(report(env, "dist-1").stdout)  # JSON on stdout by default
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["energy_j"]["total"] == pytest.approx(job_energy(totals, "dist-1"), rel=1e-12)

    for fmt in ("json", "csv", "html", "pdf"):
        out = tmp_path / f"dist.{fmt}"
        result = report(env, "dist-1", "-o", str(out))  # format from the extension
        assert f"wrote {fmt} report" in result.stderr
    assert json.loads((tmp_path / "dist.json").read_text())["job"]["id"] == "dist-1"
    [row] = csv.DictReader(io.StringIO((tmp_path / "dist.csv").read_text()))
    assert float(row["energy_total_j"]) == data["energy_j"]["total"]
    assert row["intensity_sources"].count("codecarbon:") == 2
    text = html_text((tmp_path / "dist.html").read_text()).text
    assert "codecarbon:usa-egrid2023:VA" in text and "ccf:aws" in text
    pdf = PdfReader(str(tmp_path / "dist.pdf"))
    assert "bert-large (dist-1)" in pdf.pages[0].extract_text()
    explicit = report(env, "dist-1", "--format", "csv")
    assert explicit.stdout.startswith("job_id,name,kind,status,")


def test_unknown_job_and_usage_errors_exit_2(store: tuple[dict[str, str], Any]) -> None:
    env, _ = store
    result = run_cli("report", "no-such-job", env=env)
    assert result.returncode == 2 and "no-such-job" in result.stderr and not result.stdout
    for args, message in ((("--all", "--format", "html"), "--all writes csv or json"),
                          ((), "either a JOB (id, id prefix or name) or --all"),
                          (("dist-1", "--all"), "either a JOB (id, id prefix or name) or --all"),
                          (("dist-1", "--since", "7d"), "--since goes with --all"),
                          (("--all", "--since", "last tuesday"), "--since: expected")):
        result = run_cli("report", *args, env=env)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


OLDER, LATEST = "0f3a9c1e5b7d4e2f8a6c0b1d3e5f7a9c", "0f3a11aa5b7d4e2f8a6c0b1d3e5f7a9c"


def add_runs(env: dict[str, str]) -> None:
    """Two more runs of ``bert-large`` (dist-1's name), their ids both starting ``0f3a``,
    and a job named ``secr``, which is also the start of ``secretive``'s id."""
    engine = make_engine(env["JOULESTAT_DB"])
    writer = StoreWriter(engine, LOADER, node_devices(LOADER), raw_retention_s=3600)
    for job_id, name, offset in ((OLDER, "bert-large", 200), (LATEST, "bert-large", 300),
                                 ("7e570000000000000000000000000001", "secr", 400)):
        writer.save_job(make_job(job_id, name, "training", T0 + offset, T0 + offset + 50))
    assert writer.flush()
    engine.dispose()


def test_a_job_by_name_or_id_prefix(store: tuple[dict[str, str], Any]) -> None:
    env, _ = store
    add_runs(env)
    latest = report(env, "bert-large")  # three runs: the latest, said on stderr
    assert json.loads(latest.stdout)["job"]["id"] == LATEST
    assert (f"joulestat report: 'bert-large' names 3 runs; reporting the latest, {LATEST} "
            "started ") in latest.stderr and "(give an id for another)" in latest.stderr
    single = report(env, "resnet-serve")  # one run: nothing to say
    assert json.loads(single.stdout)["job"]["id"] == "solo" and not single.stderr
    for prefix, job_id in (("0f3a9", OLDER), ("dist", "dist-1"), ("secre", "secretive")):
        found = report(env, prefix)
        assert json.loads(found.stdout)["job"]["id"] == job_id, prefix
        assert not found.stderr
    named = report(env, "secr")  # a name beats another job's id prefix, and says so
    assert json.loads(named.stdout)["job"]["id"] == "7e570000000000000000000000000001"
    assert "'secr' is a job name and also the start of the id of secretive" in named.stderr


def test_ambiguous_or_unknown_references_exit_2(store: tuple[dict[str, str], Any]) -> None:
    env, _ = store
    add_runs(env)
    ambiguous = run_cli("report", "0f3a", env=env)
    assert ambiguous.returncode == 2 and not ambiguous.stdout
    assert "'0f3a' is the start of 2 job ids" in ambiguous.stderr
    for job_id in (OLDER, LATEST):
        assert f"  {job_id}  bert-large  started " in ambiguous.stderr
    typo = run_cli("report", "bert-lage", env=env)
    assert typo.returncode == 2 and not typo.stdout
    assert ("joulestat report: no job with id, id prefix or name 'bert-lage' in the store; "
            "did you mean 'bert-large'?") in typo.stderr
    short = run_cli("report", "0f3", env=env)  # under 4 characters is no prefix
    assert short.returncode == 2 and "give at least 4 characters" in short.stderr


def test_pdf_is_not_written_to_a_terminal(store: tuple[dict[str, str], Any]) -> None:
    env, _ = store
    main, secondary = pty.openpty()
    try:
        proc = subprocess.run([JOULESTAT, "report", "dist-1", "--format", "pdf"], env=env,
                              stdout=secondary, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(secondary)
        os.close(main)
    assert proc.returncode == 2 and "-o FILE" in proc.stderr
    piped = subprocess.run([JOULESTAT, "report", "dist-1", "--format", "pdf"], env=env,
                           capture_output=True, timeout=60)
    assert piped.returncode == 0 and piped.stdout.startswith(b"%PDF-")


def test_all_since(store: tuple[dict[str, str], Any]) -> None:
    env, _ = store
    rows = list(csv.DictReader(io.StringIO(report(env, "--all", "--format", "csv").stdout)))
    assert [r["job_id"] for r in rows] == ["dist-1", "solo", "secretive"]
    # dist-1 ended at T0 + 100 s = 22:15:40Z, secretive at 22:16:00Z, solo still runs
    since = report(env, "--all", "--since", "2023-11-14T22:15:50Z", "--format", "json")
    assert [r["job"]["id"] for r in json.loads(since.stdout)] == ["solo", "secretive"]
    recent = report(env, "--all", "--since", "7d", "--format", "csv")
    assert [r["job_id"] for r in csv.DictReader(io.StringIO(recent.stdout))] == ["solo"]


def test_export_import_report_again(store: tuple[dict[str, str], Any], tmp_path: Path) -> None:
    env, _ = store
    exported = tmp_path / "all.json"
    report(env, "--all", "--format", "json", "-o", str(exported))
    target = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    result = run_cli("import", str(exported), env=target)
    assert result.returncode == 0, result.stderr
    assert "3 job(s), 4 node part(s) written: dist-1, solo, secretive" in result.stdout
    again = run_cli("import", str(exported), env=target)  # changes nothing, and says so
    assert again.returncode == 0, again.stderr
    assert ("3 job(s) unchanged: already in the store exactly so: dist-1, solo, secretive"
            in again.stdout), again.stdout
    assert "written" not in again.stdout
    originals = {r["job"]["id"]: r for r in json.loads(exported.read_text())}
    for job in ENDED:
        again = json.loads(report(target, job).stdout)
        assert_same_figures(originals[job], again)
    jobs = json.loads(run_cli("jobs", "--json", env=target).stdout)
    assert sorted(j["id"] for j in jobs) == ["dist-1", "secretive", "solo"]


SCHEMA_1 = Path(__file__).parents[1] / "fixtures" / "report-schema1.json"


def test_a_schema_1_report_imports_and_reports_the_same_figures(tmp_path: Path) -> None:
    """A report written by joulestat before the component gpu became accelerator (see
    tests/fixtures/README.md): imported and reported again through the real CLI, every
    figure is the same, its gpu energy now the accelerator's."""
    old = json.loads(SCHEMA_1.read_text())
    assert old["schema_version"] == 1 and old["energy_j"]["gpu"] > 0
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    result = run_cli("import", str(SCHEMA_1), env=env)
    assert result.returncode == 0, result.stderr
    assert "1 job(s), 2 node part(s) written: llm-9" in result.stdout, result.stdout
    again = json.loads(report(env, "llm-9", "--format", "json").stdout)
    validate(again)
    assert again["schema_version"] == 3
    for key in ("energy_j", "dynamic_energy_j", "idle_energy_j"):
        assert "gpu" not in again[key]
        assert again[key]["accelerator"] == pytest.approx(old[key]["gpu"], rel=1e-12), key
    assert again["energy_j"]["total"] == pytest.approx(old["energy_j"]["total"], rel=1e-12)
    assert again["co2e_g"] == pytest.approx(old["co2e_g"], rel=1e-12)
    for unit, figures in old["per_unit"].items():
        mine = {key: again["per_unit"][unit][key] for key in figures}
        assert mine == pytest.approx(figures, rel=1e-12), unit
        # written since: energy per unit above idle (the imported dynamic joules)
        assert again["per_unit"][unit]["dynamic_energy_j"] == pytest.approx(
            old["dynamic_energy_j"]["total"] / old["work_units"][unit], rel=1e-12)
    # The figures the old report wrote are the same (per-unit energy above idle and
    # bounds are new).
    assert_same_figures(renamed(old, "gpu", "accelerator"), {**again, **{
        table: {unit: {k: v for k, v in figures.items() if k in old[table][unit]}
                for unit, figures in again[table].items()}
        for table in ("per_unit", "per_million_units")}})
    trainer = next(n for n in again["nodes"] if n["node"] == "trainer-1")
    assert trainer["sources"]["accelerator"] == ["import:joulestat/nvml_energy"]
    csv_row = next(csv.DictReader(io.StringIO(report(env, "llm-9", "--format", "csv").stdout)))
    assert float(csv_row["energy_accelerator_j"]) == pytest.approx(old["energy_j"]["gpu"])
    # a version this joulestat does not know is refused, naming the two it reads
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**old, "schema_version": 4}))
    refused = run_cli("import", str(future), env=env)
    assert refused.returncode == 2
    assert "schema_version: this joulestat reads versions 1, 2 and 3, got 4" in refused.stderr


SCHEMA_2 = Path(__file__).parents[1] / "fixtures" / "report-schema2.json"


def test_a_schema_2_report_imports_and_its_figures_gain_bounds(tmp_path: Path) -> None:
    """A report written before figures carried bounds (tests/fixtures/README.md): imported
    through the real CLI, its figures are the same, and the report of the imported job
    (schema 3) bounds them from the sources the import kept: RAPL and NVML within a few
    percent, the tdp-curve estimate as wide as its measured error."""
    old = json.loads(SCHEMA_2.read_text())
    assert old["schema_version"] == 2 and "energy_bounds_j" not in old
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    result = run_cli("import", str(SCHEMA_2), env=env)
    assert result.returncode == 0, result.stderr
    again = json.loads(report(env, "dist-1", "--format", "json").stdout)
    validate(again)
    assert again["schema_version"] == 3
    for key in ("energy_j", "dynamic_energy_j", "idle_energy_j"):
        assert again[key] == pytest.approx(old[key], rel=1e-12), key
    assert again["co2e_g"] == pytest.approx(old["co2e_g"], rel=1e-12)
    bounds = again["energy_bounds_j"]
    for component in ("cpu", "dram", "accelerator", "total"):
        low, high = bounds[component]
        assert low <= again["energy_j"][component] <= high, component
    # the accelerator (nvml_energy) within +/-10 %, the CPU (partly model:tdp-curve) wider
    low, high = bounds["accelerator"]
    assert 0.9 * again["energy_j"]["accelerator"] <= low < high <= (
        1.1 * again["energy_j"]["accelerator"])
    sources = again["bounds"]["sources"]
    assert sources["import:joulestat/model:tdp-curve"]["basis"] == "measured"
    assert sources["import:joulestat/nvml_energy"]["high_pct"] == pytest.approx(5.0)
    for unit, figures in again["per_unit"].items():
        low, high = figures["energy_bounds_j"]
        assert low <= figures["energy_j"] <= high, unit
        assert low * again["work_units"][unit] == pytest.approx(bounds["total"][0]), unit
    low, high = again["co2e_bounds_g"]
    assert low < again["co2e_g"] < high
    assert "publishes no uncertainty" in again["bounds"]["co2e"]
    html = report(env, "dist-1", "--format", "html").stdout
    assert units.energy_range(*bounds["total"]) in html


def bad_files(tmp_path: Path, env: dict[str, str]) -> list[tuple[Path, str]]:
    """(file, what the error must say) for one file of each kind of fault."""
    good = json.loads(report(env, "dist-1").stdout)
    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps(good, indent=1)[:400])
    wrong = dict(good, nodes=[dict(good["nodes"][0], started_s="yesterday")])
    wrong_types = tmp_path / "wrong-types.json"
    wrong_types.write_text(json.dumps([good, wrong]))
    emissions = tmp_path / "emissions.csv"
    emissions.write_text("timestamp,project_name,run_id,duration,cpu_energy,gpu_energy,"
                         "ram_energy\n2024-05-01T12:00:00,p,r1,10,0.001,0,0.0001\n"
                         "2024-05-01T12:01:00,p,r2,10,0.001,lots,0.0001\n")
    return [(malformed, f"{malformed}: line "), (wrong_types,
             f"{wrong_types}: entry 1: nodes[0].started_s: expected a number"),
            (emissions, f"{emissions}: line 3: gpu_energy: expected a number, got 'lots'")]


def test_bad_files_exit_2_and_import_nothing(store: tuple[dict[str, str], Any],
                                             tmp_path: Path) -> None:
    env, _ = store
    target = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    for path, message in bad_files(tmp_path, env):
        result = run_cli("import", str(path), env=target)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "nothing of this file" in result.stderr
        assert json.loads(run_cli("jobs", "--json", env=target).stdout) == []
    # a good file beside a bad one: the good one goes in, the exit status says one failed
    good = tmp_path / "solo.json"
    good.write_text(report(env, "solo").stdout)
    result = run_cli("import", str(good), str(tmp_path / "emissions.csv"), env=target)
    assert result.returncode == 2 and "1 job(s)" in result.stdout
    assert [j["id"] for j in json.loads(run_cli("jobs", "--json", env=target).stdout)] == [
        "solo"]


CODECARBON_RUN = codecarbon_script("busy-loop", seconds=3)


@pytest.mark.slow
def test_codecarbon_file_made_by_codecarbon(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-c", CODECARBON_RUN], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**agent_env(), "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    emissions = tmp_path / "emissions.csv"
    [row] = list(csv.DictReader(io.StringIO(emissions.read_text())))
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    result = run_cli("import", str(emissions), env=env)
    assert result.returncode == 0, result.stderr
    job_id = f"codecarbon:{row['run_id']}"
    data = json.loads(report(env, job_id).stdout)
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
    page = html_text(report(env, job_id, "--format", "html").stdout).text
    # "17.4 mg over 550 mWh (joulestat's: ...)": its figure, the energy it applied it to
    assert f"CodeCarbon's own CO2e {own} over " in page
    assert f"(joulestat's: {units.mass(data['co2e_g'])}" in page
    again = run_cli("import", str(emissions), env=env)
    assert "1 job(s) unchanged" in again.stdout, again.stdout
    # CodeCarbon's naive local timestamp is the run's end, read in local time
    assert abs(data["job"]["ended_s"] - time.time()) < 300


def test_import_sets_name_kind_and_labels(tmp_path: Path) -> None:
    from tests.helpers.honest_store import CODECARBON_HEADER, codecarbon_row

    emissions = tmp_path / "emissions.csv"
    emissions.write_text(CODECARBON_HEADER + codecarbon_row("r1", "2024-05-01T12:00:00"))
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    result = run_cli("import", str(emissions), "--name", "mlp-train-cc", "--kind", "training",
                     "--label", "team=vision", env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(report(env, "codecarbon:r1").stdout)
    assert (data["job"]["name"], data["job"]["kind"]) == ("mlp-train-cc", "training")
    assert data["job"]["labels"]["team"] == "vision"
    bad = run_cli("import", str(emissions), "--label", "oops", env=env)
    assert bad.returncode == 2 and "--label 'oops': expected KEY=VALUE" in bad.stderr
