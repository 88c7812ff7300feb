"""Issue 46: no figure is printed as an exponent ("1.2e-05") on any page or in any
report a person reads (HTML, PDF, the text of `joulestat compare`), on the sample store,
whose figures run from nanograms to megajoules. CSV and JSON keep full precision for
programs (docs/reports.md)."""

from __future__ import annotations

import io
import re

import pytest
from pypdf import PdfReader

from joulestat.reports.compare.figures import load_job_figures
from joulestat.reports.compare.table import compare
from joulestat.reports.compare.words import render_text
from joulestat.reports.html_report import render_html
from joulestat.reports.model import build_report
from joulestat.reports.pdf_report import render_pdf
from joulestat.store.engine import make_engine
from joulestat.store.jobs import list_jobs
from tests.helpers.dashboard_app import PAGES, run_page, sample_store_url

EXPONENT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE][+-]?\d+(?![\w.])")


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sample_store_url(tmp_path_factory.mktemp("no-exponents"))


@pytest.mark.parametrize("page", PAGES)
def test_no_page_writes_an_exponent(sample_url, page, monkeypatch) -> None:
    at = run_page(sample_url, page, monkeypatch)
    texts = [m.value for m in at.metric] + [m.value for m in at.markdown]
    texts += [c.value for c in at.caption] + [h.value for h in at.subheader]
    found = [t for t in texts if EXPONENT.search(str(t))]
    assert not found, found


def test_no_report_or_comparison_writes_an_exponent(sample_url) -> None:
    engine = make_engine(sample_url)
    try:
        jobs = list_jobs(engine)
        for job in jobs[:6]:
            report = build_report(engine, job.id)
            html = render_html(report)
            assert not EXPONENT.search(re.sub(r"<[^>]+>", " ", html)), job.name
            pdf = " ".join(page.extract_text() for page in
                           PdfReader(io.BytesIO(render_pdf(report))).pages)
            assert not EXPONENT.search(pdf), job.name
        for by in ("job", "instance_type"):
            text = render_text(compare(load_job_figures(engine), by=by), [], wide=True)
            assert not EXPONENT.search(text), text
    finally:
        engine.dispose()


def test_the_check_finds_an_exponent() -> None:
    assert EXPONENT.search("CO2e 1.2e-05 g") and EXPONENT.search("3E+06 J")
    assert not EXPONENT.search("bert-e5 job") and not EXPONENT.search("12.0 µg, 3.40 MJ")
