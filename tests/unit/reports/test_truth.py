"""Issue 11 in reports, imports and ``joulestat compare``: a headline, every estimated
factor in the notes, the untracked CPU share, PDF tables of one width and an axis that
ends with the job, imports that keep their profile and CodeCarbon's own CO2e, a
re-import that says "unchanged", and comparisons by a label."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from reportlab.lib.styles import getSampleStyleSheet
from sqlalchemy.engine import Engine

from joulestat.core import units
from joulestat.reports import tables
from joulestat.reports.compare.figures import load_job_figures
from joulestat.reports.compare.table import compare
from joulestat.reports.compare.words import render_text
from joulestat.reports.html_report import render_html
from joulestat.reports.importer import import_file
from joulestat.reports.json_report import render_json
from joulestat.reports.model import build_report
from joulestat.reports.pdf_report import MARGIN, PAGE, _pdf_table, chart_drawing
from tests.helpers.honest_store import CODECARBON_HEADER, codecarbon_row, fill, new_store
from tests.helpers.report_checks import validate
from tests.helpers.report_store import NOW, Totals, filled_store


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Engine, dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("honest-reports")
    engine = new_store(tmp / "store.db")
    return engine, fill(engine, tmp)


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Engine, Totals]:
    return filled_store(tmp_path)


def test_a_report_opens_with_a_headline(honest: tuple[Engine, Any]) -> None:
    engine, _ = honest
    report = build_report(engine, "steady")
    validate(report)
    per_sample = report["per_unit"]["sample"]
    assert report["headline"] == (
        f"steady (training, 1 min 01 s) used {units.energy(report['energy_j']['total'])}, "
        f"{units.energy_range(*report['energy_bounds_j']['total'])} "
        f"({units.energy_wh(report['energy_j']['total'])}): {units.mass(report['co2e_g'])} "
        "CO2e operational (embodied unknown), cost unknown; "
        f"{units.energy(per_sample['energy_j'])} "
        f"({units.energy(per_sample['dynamic_energy_j'])} above idle) and "
        f"{units.mass(per_sample['co2e_g'])} CO2e per sample (idle policy not recorded). "
        "Energy 100 % measured.")
    page = render_html(report)
    assert f'<p class="headline">{report["headline"]}</p>' in page
    vm = build_report(engine, "vm-ramp")
    assert vm["headline"].endswith(
        "Energy 100 % estimated (import:joulestat/model:ccf-vcpu, "
        "import:joulestat/model:dram-gib).")


def test_notes_list_every_estimated_factor(honest: tuple[Engine, Any]) -> None:
    engine, _ = honest
    report = build_report(engine, "vm-ramp")
    notes = "\n".join(report["notes"])
    assert ("node vm-remote-1: cpu energy is estimated (import:joulestat/model:ccf-vcpu)"
            in notes)
    assert "node vm-remote-1: dram energy is estimated" in notes
    assert "node vm-remote-1: grid intensity" in notes and "annual average" in notes
    assert "PUE 1.14 is the provider's fleet average" in notes
    assert "node vm-remote-1: cost at the catalog's list price" in notes
    assert "node vm-remote-1: embodied CO2e is estimated" in notes
    page = render_html(report)
    assert "None: every figure is known" not in page
    assert "Notes: unknowns and estimated factors" in page


def test_the_untracked_cpu_share_of_the_node(shared: tuple[Engine, Totals]) -> None:
    engine, _ = shared
    report = build_report(engine, "dist-1", now_s=NOW)
    # fill_store: the node was busy 2 CPU-s a tick, the job used 0.3-0.5 of them
    for node in report["nodes"]:
        assert node["untracked_cpu_share"] == pytest.approx(0.8, abs=0.01), node["node"]
    summary = dict(tables.summary(report).rows)
    assert summary["Untracked CPU time on the node"].startswith("80 % on loader-1; 80 % on")
    assert any("80 % of its busy CPU time during the job belonged to processes no job "
               "tracked" in note for note in report["notes"])


def test_pdf_tables_share_one_width_and_the_axis_ends_with_the_job(
        honest: tuple[Engine, Any]) -> None:
    engine, _ = honest
    report = build_report(engine, "steady")
    width = PAGE[0] - 2 * MARGIN
    cell = getSampleStyleSheet()["BodyText"]
    for table in [tables.summary(report), *tables.all_tables(report)]:
        assert sum(_pdf_table(table, cell)._colWidths) == pytest.approx(width), table.title
    plot = next(s for s in chart_drawing(report).contents if hasattr(s, "xValueAxis"))
    span = report["job"]["duration_s"]
    assert plot.xValueAxis.valueMax == pytest.approx(span, abs=0.01)  # 61.4 s, not 80
    assert len(tables.methodology_paragraphs(report["methodology"])) == 6


def test_import_keeps_the_profile_and_a_reexport_gives_it_back(
        honest: tuple[Engine, Any], tmp_path: Path) -> None:
    engine, files = honest
    original = json.loads(files["report"].read_text())
    again = build_report(engine, "vm-ramp", now_s=original["generated_s"])
    assert len(again["power_series"]) == len(original["power_series"]) > 20
    for before, after in zip(original["power_series"], again["power_series"], strict=True):
        assert after["t_start_s"] == pytest.approx(before["t_start_s"], abs=1e-6)
        assert after["power_w"] == pytest.approx(before["power_w"], rel=1e-6, abs=1e-9)
    [node] = again["nodes"]
    assert node["untracked_cpu_share"] is None  # the file did not carry the node's others
    before_units = original["nodes"][0]["unit_series"]
    assert len(node["unit_series"]) == len(before_units) > 20
    for before, after in zip(before_units, node["unit_series"], strict=True):
        assert after["unit"] == before["unit"]
        assert after["t_end_s"] == pytest.approx(before["t_end_s"], abs=1e-3)
        assert after["count"] == pytest.approx(before["count"], rel=1e-9)
    # the export of an import imports again as it was: unchanged
    exported = tmp_path / "again.json"
    exported.write_text(render_json(again))
    result = import_file(engine, exported)
    assert (result.nodes, result.unchanged) == (0, 1)


def test_a_second_import_is_unchanged(tmp_path: Path, honest: tuple[Engine, Any]) -> None:
    _engine, files = honest
    target = new_store(tmp_path / "target.db")
    first = import_file(target, files["codecarbon"])
    assert (first.nodes, first.unchanged) == (1, 0)
    second = import_file(target, files["codecarbon"])
    assert (second.nodes, second.unchanged) == (0, 1)


def test_codecarbon_keeps_its_own_co2e_and_says_what_it_measured_with(
        honest: tuple[Engine, Any]) -> None:
    engine, _ = honest
    report = build_report(engine, "codecarbon:cc-run-1")
    validate(report)
    assert report["job"]["name"] == "codecarbon:mlp-train"
    assert report["job"]["labels"]["project_name"] == "mlp-train"
    [external] = report["external_co2e"]
    assert external["co2e_g"] == pytest.approx(1.74e-05 * 1000)
    assert external["intensity_g_per_kwh"] == pytest.approx(17.4e-3 / 0.00055)
    assert report["sources"] == {"cpu": ["import:codecarbon"],
                                 "dram": ["import:codecarbon/model:codecarbon-ram"]}
    assert any(note.startswith("CodeCarbon 3.3.2's own CO2e is 17.4 mg") and
               f"joulestat recomputed {units.mass(report['co2e_g'])}" in note
               for note in report["notes"])
    summary = dict(tables.summary(report).rows)
    assert summary["CodeCarbon's own CO2e"].startswith("17.4 mg over 550 mWh (joulestat's: ")


def test_import_name_kind_and_labels(tmp_path: Path) -> None:
    from joulestat.reports.importer import Overrides

    path = tmp_path / "emissions.csv"
    path.write_text(CODECARBON_HEADER + codecarbon_row("r1", "2024-05-01T12:00:00"))
    target = new_store(tmp_path / "target.db")
    import_file(target, path, Overrides("mlp-train-cc", "training", {"team": "vision"}))
    report = build_report(target, "codecarbon:r1")
    assert (report["job"]["name"], report["job"]["kind"]) == ("mlp-train-cc", "training")
    assert report["job"]["labels"]["team"] == "vision"


def test_compare_by_a_label_and_same_name_runs_by_their_labels(
        honest: tuple[Engine, Any]) -> None:
    engine, _ = honest
    figures = load_job_figures(engine, kind="inference", jobs=["mlp-serve"])
    table = compare(figures, by="label:concurrency", unit="request", baseline="4")
    assert [r.group for r in table.rows] == ["concurrency=1", "concurrency=4",
                                             "concurrency=16"]
    assert table.baseline == "concurrency=4"
    one = table.rows[0]
    assert one.units == 4800 + 200 and one.runs == 2  # the smoke test pools with it
    by_job = compare(figures[:3], by="job", unit="request")
    text = render_text(by_job, [])
    for level in ("1", "4", "16"):
        assert f"mlp-serve concurrency={level}" in text, text
    for row in by_job.rows:  # each figure as joulestat.core.units writes it, with its unit
        assert units.energy(row.energy_per_unit_j) in text
        assert units.mass(row.co2e_per_unit_g) in text
    assert "e-0" not in text and "0.0000" not in text


def test_compare_says_which_rows_were_measured(honest: tuple[Engine, Any]) -> None:
    """The one rule of joulestat.reports.sources, in joulestat compare too."""
    engine, _ = honest
    table = compare(load_job_figures(engine, kind="training"), by="instance_type",
                    unit="sample")
    classes = {r.group: r.energy_class for r in table.rows}
    assert classes == {"local": "measured", "g5.xlarge": "measured",
                       "c6i.2xlarge": "estimated", "c6i.xlarge": "estimated"}
    text = render_text(table, [])
    [vm] = [line for line in text.splitlines()
            if line.startswith("c6i.xlarge ") and " vs " not in line]
    assert vm.rstrip().endswith("estimated")
