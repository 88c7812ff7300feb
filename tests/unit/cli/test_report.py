"""``joulestat report`` as a user runs it: every format on stdout or into a file, a job
named by id, id prefix or name (and what is said when that is ambiguous), ``--all
--since``, and the usage errors, each exit 2. The real command runs in this process
(tests/helpers/cli.py) on a store filled through the store API
(:mod:`tests.helpers.report_store`). What it does on a terminal is in
tests/system/test_report_cli.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import jsonschema
import pytest
from pypdf import PdfReader

from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter
from tests.helpers.cli import invoke
from tests.helpers.report_checks import SCHEMA, html_text, report_ok
from tests.helpers.report_store import LOADER, T0, Totals, job_energy, make_job, node_devices

Env = tuple[dict[str, str], Totals]


def test_every_format_from_the_cli(report_env: Env, tmp_path: Path) -> None:
    env, totals = report_env
    data = json.loads(report_ok(env, "dist-1").stdout)  # JSON on stdout by default
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["energy_j"]["total"] == pytest.approx(job_energy(totals, "dist-1"), rel=1e-12)

    for fmt in ("json", "csv", "html", "pdf"):
        out = tmp_path / f"dist.{fmt}"
        result = report_ok(env, "dist-1", "-o", str(out))  # format from the extension
        assert f"wrote {fmt} report" in result.stderr
    assert json.loads((tmp_path / "dist.json").read_text())["job"]["id"] == "dist-1"
    [row] = csv.DictReader(io.StringIO((tmp_path / "dist.csv").read_text()))
    assert float(row["energy_total_j"]) == data["energy_j"]["total"]
    assert row["intensity_sources"].count("codecarbon:") == 2
    text = html_text((tmp_path / "dist.html").read_text()).text
    assert "codecarbon:usa-egrid2023:VA" in text and "ccf:aws" in text
    pdf = PdfReader(str(tmp_path / "dist.pdf"))
    assert "bert-large (dist-1)" in pdf.pages[0].extract_text()
    explicit = report_ok(env, "dist-1", "--format", "csv")
    assert explicit.stdout.startswith("job_id,name,kind,status,")


def test_unknown_job_and_usage_errors_exit_2(report_env: Env) -> None:
    env, _ = report_env
    result = invoke("report", "no-such-job", env=env)
    assert result.returncode == 2 and "no-such-job" in result.stderr and not result.stdout
    for args, message in ((("--all", "--format", "html"), "--all writes csv or json"),
                          ((), "either a JOB (id, id prefix or name) or --all"),
                          (("dist-1", "--all"), "either a JOB (id, id prefix or name) or --all"),
                          (("dist-1", "--since", "7d"), "--since goes with --all"),
                          (("--all", "--since", "last tuesday"), "--since: expected")):
        result = invoke("report", *args, env=env)
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


def test_a_job_by_name_or_id_prefix(report_env: Env) -> None:
    env, _ = report_env
    add_runs(env)
    latest = report_ok(env, "bert-large")  # three runs: the latest, said on stderr
    assert json.loads(latest.stdout)["job"]["id"] == LATEST
    assert (f"joulestat report: 'bert-large' names 3 runs; reporting the latest, {LATEST} "
            "started ") in latest.stderr and "(give an id for another)" in latest.stderr
    single = report_ok(env, "resnet-serve")  # one run: nothing to say
    assert json.loads(single.stdout)["job"]["id"] == "solo" and not single.stderr
    for prefix, job_id in (("0f3a9", OLDER), ("dist", "dist-1"), ("secre", "secretive")):
        found = report_ok(env, prefix)
        assert json.loads(found.stdout)["job"]["id"] == job_id, prefix
        assert not found.stderr
    named = report_ok(env, "secr")  # a name beats another job's id prefix, and says so
    assert json.loads(named.stdout)["job"]["id"] == "7e570000000000000000000000000001"
    assert "'secr' is a job name and also the start of the id of secretive" in named.stderr


def test_ambiguous_or_unknown_references_exit_2(report_env: Env) -> None:
    env, _ = report_env
    add_runs(env)
    ambiguous = invoke("report", "0f3a", env=env)
    assert ambiguous.returncode == 2 and not ambiguous.stdout
    assert "'0f3a' is the start of 2 job ids" in ambiguous.stderr
    for job_id in (OLDER, LATEST):
        assert f"  {job_id}  bert-large  started " in ambiguous.stderr
    typo = invoke("report", "bert-lage", env=env)
    assert typo.returncode == 2 and not typo.stdout
    assert ("joulestat report: no job with id, id prefix or name 'bert-lage' in the store; "
            "did you mean 'bert-large'?") in typo.stderr
    short = invoke("report", "0f3", env=env)  # under 4 characters is no prefix
    assert short.returncode == 2 and "give at least 4 characters" in short.stderr


def test_a_pdf_goes_to_stdout_when_it_is_not_a_terminal(report_env: Env) -> None:
    """Piped (here: stdout a buffer, not a terminal), ``--format pdf`` writes the PDF's
    bytes to stdout. On a terminal it refuses: tests/system/test_report_cli.py."""
    env, _ = report_env
    piped = invoke("report", "dist-1", "--format", "pdf", env=env)
    assert piped.returncode == 0 and piped.stdout_bytes.startswith(b"%PDF-")


def test_all_since(report_env: Env) -> None:
    env, _ = report_env
    rows = list(csv.DictReader(io.StringIO(report_ok(env, "--all", "--format", "csv").stdout)))
    assert [r["job_id"] for r in rows] == ["dist-1", "solo", "secretive"]
    # dist-1 ended at T0 + 100 s = 22:15:40Z, secretive at 22:16:00Z, solo still runs
    since = report_ok(env, "--all", "--since", "2023-11-14T22:15:50Z", "--format", "json")
    assert [r["job"]["id"] for r in json.loads(since.stdout)] == ["solo", "secretive"]
    recent = report_ok(env, "--all", "--since", "7d", "--format", "csv")
    assert [r["job_id"] for r in csv.DictReader(io.StringIO(recent.stdout))] == ["solo"]


def _all_reports(env: dict[str, str]) -> list[dict]:
    return json.loads(report_ok(env, "--all").stdout)


def test_a_summary_by_team_is_its_jobs_reports_added_up(report_env: Env,
                                                        tmp_path: Path) -> None:
    """Issue 46: a summary a sustainability team hands on (kg CO2e per team, label,
    month or instance type), in every format; each group's figures are its jobs'
    reports summed, one value per CSV cell."""
    env, _ = report_env
    reports = {r["job"]["id"]: r for r in _all_reports(env)}
    rows = list(csv.DictReader(io.StringIO(
        report_ok(env, "--all", "--by", "team", "--format", "csv").stdout)))
    by_group = {row["group"]: row for row in rows}
    assert set(by_group) == {"nlp", "(none)", "total"}
    assert int(by_group["nlp"]["jobs"]) == 2 and int(by_group["(none)"]["jobs"]) == 1
    nlp = [reports["dist-1"], reports["secretive"]]
    assert float(by_group["nlp"]["energy_j"]) == pytest.approx(
        sum(r["energy_j"]["total"] for r in nlp))
    assert float(by_group["nlp"]["total_co2e_kg"]) == pytest.approx(
        sum(r["total_co2e_g"] for r in nlp) / 1000)
    total_j = sum(r["energy_j"]["total"] for r in reports.values())
    assert float(by_group["total"]["energy_j"]) == pytest.approx(total_j)
    assert float(by_group["total"]["energy_kwh"]) == pytest.approx(total_j / 3.6e6)
    for row in rows:  # one value a cell: a number, or empty for unknown
        for column, cell in row.items():
            if column != "group" and cell:
                float(cell)
    # By instance type a job is split by its nodes; the parts add up to the same total.
    parts = json.loads(report_ok(env, "--all", "--by", "instance_type").stdout)
    assert {g["group"] for g in parts["groups"]} == {"c5.4xlarge", "p4d.24xlarge", "homebuilt"}
    assert sum(g["energy_j"] for g in parts["groups"]) == pytest.approx(total_j)
    assert parts["total"]["jobs"] == 3
    for by in ("kind", "region", "label:run"):  # the other documented keys
        groups = json.loads(report_ok(env, "--all", "--by", by).stdout)["groups"]
        assert sum(g["energy_j"] for g in groups) == pytest.approx(total_j), by
    # HTML and PDF, as a reader gets them.
    report_ok(env, "--all", "--by", "label:team", "-o", str(tmp_path / "teams.html"))
    text = html_text((tmp_path / "teams.html").read_text()).text
    assert "joulestat summary by label team" in text and "nlp" in text and "CO2e total" in text
    report_ok(env, "--all", "--by", "month", "-o", str(tmp_path / "months.pdf"))
    page = PdfReader(str(tmp_path / "months.pdf")).pages[0].extract_text()
    assert "joulestat summary by month" in page and "2023-11" in page


def test_a_summary_escapes_and_neutralises_label_values() -> None:
    """A label value is user input: escaped in HTML, never a formula in CSV."""
    from joulestat.reports.html_report import render_summary_html
    from joulestat.reports.summary import GroupBy, render_summary_csv, summarize

    def report(job_id: str, team: str) -> dict:
        return {"job": {"id": job_id, "labels": {"team": team}, "started_at": "2026-12-01",
                        "kind": "training"}, "nodes": [], "energy_j": {"total": 3.6e6},
                "co2e_g": 100.0, "embodied_co2e_g": 10.0, "cost_usd": None}

    summary = summarize([report("a", "=HYPERLINK(1)"), report("b", "<script>x</script>")],
                        GroupBy.parse("team"), "every job", "now")
    rows = list(csv.DictReader(io.StringIO(render_summary_csv(summary))))
    assert sorted(row["group"] for row in rows) == ["'=HYPERLINK(1)", "<script>x</script>",
                                                    "total"]
    assert rows[-1]["cost_usd"] == "" and rows[-1]["unpriced_jobs"] == "2"  # unknown, not 0
    assert float(rows[-1]["energy_kwh"]) == 2.0
    page = render_summary_html(summary)
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_summary_usage_errors_exit_2(report_env: Env) -> None:
    env, _ = report_env
    for args, message in ((("dist-1", "--by", "team"), "--by goes with --all"),
                          (("--all", "--by", "colour"), "--by: expected label:KEY")):
        result = invoke("report", *args, env=env)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
