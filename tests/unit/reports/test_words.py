"""Issue 11's review, in reports: what a CodeCarbon run's report says in words.

The headline read "60 % estimated, 40 % unstated (import:codecarbon,
import:codecarbon/model:codecarbon-ram)": the sources ran in the opposite order to the
classes. The summary's labels printed ``codecarbon_emissions_kg=1.74e-05,
codecarbon_energy_kwh=0.00055``, CodeCarbon's figures a second time and in exponents.
Both are checked on a CodeCarbon CSV imported as ``joulestat import`` imports it, in the
report's HTML and PDF (the PDF's text through pypdf, as tests/unit/reports/test_formats.py
reads it).
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from pypdf import PdfReader

from joulestat.reports import tables
from joulestat.reports.html_report import render_html
from joulestat.reports.importer import import_file
from joulestat.reports.model import build_report
from joulestat.reports.narrative import headline
from joulestat.reports.pdf_report import render_pdf
from joulestat.reports.sources import source_class
from tests.helpers.honest_store import CODECARBON_HEADER, codecarbon_row, new_store


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """CodeCarbon's 60 s run: 2.2e-4 kWh of CPU (not stated how), 3.3e-4 kWh of RAM
    (CodeCarbon's RAM model), 1.74e-05 kg CO2e of its own."""
    tmp = tmp_path_factory.mktemp("codecarbon-words")
    csv = tmp / "emissions.csv"
    csv.write_text(CODECARBON_HEADER + codecarbon_row("cc-words", "2024-05-01T12:00:00"))
    engine = new_store(tmp / "store.db")
    import_file(engine, csv)
    try:
        return build_report(engine, "codecarbon:cc-words")
    finally:
        engine.dispose()


def test_each_class_names_its_own_sources(report: dict[str, Any]) -> None:
    phrase = report["headline"].split(". Energy ", 1)[1]
    assert phrase == ("60 % estimated (import:codecarbon/model:codecarbon-ram), "
                      "40 % unstated (import:codecarbon)."), phrase
    for share, cls, sources in re.findall(r"([\d.]+ %) (\w+) \(([^)]*)\)", phrase):
        assert {source_class(s) for s in sources.split(", ")} == {cls}, (share, sources)


def test_measured_energy_needs_no_names_and_classes_follow_their_share() -> None:
    report = {"job": {"name": "mix", "kind": "training", "duration_s": 60.0},
              "energy_j": {"total": 100.0}, "embodied_co2e_g": None, "co2e_g": 1.0,
              "cost_usd": None, "per_unit": {}, "work_units": {},
              "energy_by_class": {"estimated": 30.0, "measured": 70.0},
              "sources": {"cpu": ["rapl"], "dram": ["model:dram-gib"],
                          "accelerator": ["nvml_energy"]}}
    assert headline(report).endswith("Energy 70 % measured, 30 % estimated (model:dram-gib).")


def test_codecarbon_figures_appear_once_and_formatted(report: dict[str, Any]) -> None:
    summary = dict(tables.summary(report).rows)
    assert "codecarbon_emissions_kg" not in summary["Labels"], summary["Labels"]
    assert "codecarbon_energy_kwh" not in summary["Labels"]
    assert summary["CodeCarbon's own CO2e"].startswith("17.4 mg over 550 mWh (joulestat's: ")
    html = render_html(report)
    assert "codecarbon_emissions_kg" not in html and "codecarbon_energy_kwh" not in html
    assert "e-05" not in html and "0.00055" not in html
    assert html.count("17.4 mg") >= 1
    reader = PdfReader(io.BytesIO(render_pdf(report)))
    text = " ".join(page.extract_text() for page in reader.pages)
    assert "codecarbon_emissions_kg" not in text and "e-05" not in text
    assert "17.4 mg over 550 mWh" in " ".join(text.split())
