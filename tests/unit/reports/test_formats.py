"""Every format, made from real stored jobs and read back: JSON against the schema, CSV
columns and values, HTML through html.parser, PDF through pypdf."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pypdf import PdfReader
from sqlalchemy.engine import Engine

from joulestat.core import units as fmt
from joulestat.reports.csv_report import COLUMN_NAMES, render_csv
from joulestat.reports.html_report import render_html
from joulestat.reports.json_report import render_json, render_json_many
from joulestat.reports.model import build_report
from joulestat.reports.pdf_report import render_pdf
from tests.helpers.report_checks import SCHEMA, html_text
from tests.helpers.report_store import (
    NOW,
    T0,
    Totals,
    filled_store,
    job_energy,
)

# The documented, stable CSV header (docs/reports.md): a change here is a breaking change.
EXPECTED_COLUMNS = (
    "job_id", "name", "kind", "status", "labels", "started_at", "ended_at", "duration_s",
    "nodes", "instance_types", "regions", "energy_cpu_j", "energy_dram_j", "energy_accelerator_j",
    "energy_net_j", "energy_other_j", "energy_total_j", "energy_kwh", "dynamic_energy_j",
    "idle_energy_j", "co2e_g", "embodied_co2e_g", "total_co2e_g",
    "carbon_intensity_g_per_kwh", "pue", "cost_usd", "cost_note", "work_units",
    "throughput_per_hour", "energy_j_per_unit", "co2e_g_per_unit", "cost_usd_per_unit",
    "sci_co2e_g_per_unit", "co2e_g_per_million_units", "cost_usd_per_million_units",
    "region_resolution", "intensity_sources", "intensity_years", "pue_sources",
    "energy_sources", "notes", "agent_version", "generated_at",
    # appended for issue 11 (columns are only ever appended)
    "energy_by_class", "untracked_cpu_shares", "external_co2e_g",
    # appended for issue 24: what joulestat recorded, apart from the user's labels;
    # energy per unit above idle, and the idle policy
    "agent_labels", "dynamic_energy_j_per_unit", "idle_policy",
    # appended for issue 46: served latency, one figure a cell
    "latency_ttft_p50_s", "latency_ttft_p99_s", "latency_itl_p50_s", "latency_itl_p99_s",
    "latency_e2e_p50_s", "latency_e2e_p99_s",
)


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Engine, Totals]:
    return filled_store(tmp_path)


@pytest.fixture
def reports(filled: tuple[Engine, Totals]) -> dict[str, dict[str, Any]]:
    engine, _ = filled
    return {job: build_report(engine, job, now_s=NOW)
            for job in ("dist-1", "solo", "secretive")}


def pdf_text(data: bytes) -> str:
    reader = PdfReader(io.BytesIO(data))
    return re.sub(r"\s+", " ", " ".join(page.extract_text() for page in reader.pages))


def test_json_reads_back_identical_and_valid(reports: dict[str, dict[str, Any]]) -> None:
    for report in reports.values():
        back = json.loads(render_json(report))
        assert back == report  # floats round-trip exactly
        jsonschema.Draft202012Validator(SCHEMA).validate(back)
    many = json.loads(render_json_many(list(reports.values())))
    assert [r["job"]["id"] for r in many] == ["dist-1", "solo", "secretive"]


def test_csv_columns_and_values(reports: dict[str, dict[str, Any]],
                                filled: tuple[Engine, Totals]) -> None:
    _, totals = filled
    assert COLUMN_NAMES == EXPECTED_COLUMNS
    rows = list(csv.DictReader(io.StringIO(render_csv(list(reports.values())))))
    assert [r["job_id"] for r in rows] == ["dist-1", "solo", "secretive"]
    dist, solo, secretive = rows
    assert list(dist) == list(EXPECTED_COLUMNS)
    assert float(dist["energy_total_j"]) == pytest.approx(job_energy(totals, "dist-1"),
                                                          rel=1e-12)
    assert float(dist["energy_accelerator_j"]) == reports["dist-1"]["energy_j"]["accelerator"]
    assert float(dist["co2e_g"]) == reports["dist-1"]["co2e_g"]  # full precision
    assert float(dist["cost_usd"]) == reports["dist-1"]["cost_usd"]
    assert (dist["nodes"], dist["status"], dist["duration_s"]) == ("2", "ended", "100")
    assert dist["instance_types"] == "loader-1=c5.4xlarge | trainer-1=p4d.24xlarge"
    assert dist["regions"] == "loader-1=eu-west-1 | trainer-1=us-east-1"
    assert dist["work_units"] == "sample=5760; token=409600"
    assert dist["energy_sources"] == "accelerator=nvml_energy; cpu=model:tdp-curve,rapl; dram=rapl"
    assert "trainer-1=codecarbon:usa-egrid2023:VA" in dist["intensity_sources"]
    assert "loader-1=codecarbon:energy-mix:IRL" in dist["intensity_sources"]
    assert "trainer-1=ccf:aws" in dist["pue_sources"]
    assert "US state" in dist["region_resolution"] and "country" in dist["region_resolution"]
    # Unknown is an empty cell, never 0; the note says why.
    assert solo["cost_usd"] == "" and solo["embodied_co2e_g"] == ""
    assert "homebuilt" in solo["cost_note"] and solo["ended_at"] == ""
    assert "world average" in solo["region_resolution"]
    assert "mars-central-7" in solo["region_resolution"]
    assert secretive["labels"] == "api_token=[redacted]; db_password=[redacted]; team=nlp"
    # What joulestat recorded is its own column, never among the labels.
    assert dist["labels"] == "run=42; team=nlp"
    assert dist["agent_labels"] == "cpu_source=process tree; idle_policy=share"
    assert (solo["agent_labels"], secretive["agent_labels"]) == ("idle_policy=exclude", "")
    # Energy per unit twice: in all and above idle (the stored dynamic joules over units),
    # under the policy the agent recorded (none for a job it did not).
    dynamic_j = sum(d for (job, _node, _c), (d, _i) in totals.items() if job == "dist-1")
    total_j = job_energy(totals, "dist-1")
    per = dict(pair.split("=") for pair in dist["dynamic_energy_j_per_unit"].split("; "))
    assert float(per["sample"]) == pytest.approx(dynamic_j / 5760, rel=1e-12)
    assert float(per["token"]) == pytest.approx(dynamic_j / 409600, rel=1e-12)
    assert 0 < dynamic_j < total_j  # the fixture's jobs carry idle power too
    assert [r["idle_policy"] for r in rows] == ["share", "exclude", ""]


def test_html_is_one_self_contained_page(reports: dict[str, dict[str, Any]]) -> None:
    page = render_html(reports["dist-1"])
    parsed = html_text(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags
    assert "img" not in parsed.tags and "iframe" not in parsed.tags
    assert not [v for k, v in parsed.attrs if k in ("src", "href")]
    assert "svg" in parsed.tags and "polyline" in parsed.tags and "style" in parsed.tags
    text = parsed.text
    for expected in ("bert-large (dist-1)", "Power over time", "loader-1", "trainer-1",
                     "c5.4xlarge", "p4d.24xlarge", "18.8 kJ", "$0.627",
                     "codecarbon:usa-egrid2023:VA", "codecarbon:energy-mix:IRL", "ccf:aws",
                     "US state figure", "country figure", "model:tdp-curve", "nvml_energy",
                     "SCI/unit", "sample", "token", "Methodology",
                     "Operational emissions (SCI's E x I", "Energy 96 % measured"):
        assert expected in text, expected
    # one polyline per component in the chart, with the legend naming them
    assert parsed.tags.count("polyline") == 3
    # the user's labels, and apart what joulestat recorded about how it measured
    assert "run=42, team=nlp" in text
    assert "Recorded by joulestat" in text
    assert text.count("cpu_source=process tree, idle_policy=share") == 1
    assert "unknown (stored or reported before joulestat recorded it" in html_text(
        render_html(reports["secretive"])).text
    # energy per unit twice, and the idle policy the agent recorded
    per_sample = reports["dist-1"]["per_unit"]["sample"]
    for expected in ("Idle policy", "share: the node's idle power is split",
                     "dynamic energy/unit (above idle)",
                     fmt.energy(per_sample["dynamic_energy_j"])):
        assert expected in text, expected


def test_html_escapes_store_text(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["solo"]
    report["job"]["name"] = "<script>alert(1)</script>"
    page = render_html(report)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_html_unknowns_and_fallback(reports: dict[str, dict[str, Any]]) -> None:
    text = html_text(render_html(reports["solo"])).text
    assert "world average figure (fallback)" in text and "mars-central-7" in text
    assert "unknown (cost unknown for node odd-1" in text
    assert "default:unknown-facility" in text


def test_pdf_opens_and_holds_the_content(reports: dict[str, dict[str, Any]]) -> None:
    data = render_pdf(reports["dist-1"])
    assert data.startswith(b"%PDF-")
    reader = PdfReader(io.BytesIO(data))
    assert reader.metadata.title == "joulestat report: bert-large (dist-1)"
    text = pdf_text(data)
    for expected in ("bert-large (dist-1)", "Power over time", "loader-1", "trainer-1",
                     "c5.4xlarge", "p4d.24xlarge", "18.8 kJ", "$0.627", "ccf:aws",
                     "US state figure", "country figure", "model:tdp-curve", "Methodology",
                     "time since start (seconds)", "power (W)", "Idle policy",
                     "share: the node's idle power", "above idle",
                     fmt.energy(reports["dist-1"]["per_unit"]["sample"]["dynamic_energy_j"])):
        assert expected in text, expected
    assert "codecarbon:usa-egrid2023:VA" in text.replace(" ", "")


def test_pdf_says_what_is_unknown(reports: dict[str, dict[str, Any]]) -> None:
    text = pdf_text(render_pdf(reports["solo"]))
    assert "world average" in text and "mars-central-7" in text.replace(" ", "")
    assert "unknown" in text and "odd-1" in text


def test_no_energy_yet_renders_in_every_format(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    from joulestat.store.writer import StoreWriter
    from tests.helpers.report_store import ODD, make_job, node_devices

    writer = StoreWriter(engine, ODD, node_devices(ODD), raw_retention_s=3600)
    writer.save_job(make_job("fresh", "just-started", "training", T0 + 300))
    assert writer.flush()
    report = build_report(engine, "fresh", now_s=T0 + 301)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert report["energy_j"]["total"] == 0 and report["power_series"] == []
    assert "No energy recorded" in html_text(render_html(report)).text
    assert "No energy recorded" in pdf_text(render_pdf(report))
    assert list(csv.DictReader(io.StringIO(render_csv([report]))))[0]["energy_total_j"] == "0"
