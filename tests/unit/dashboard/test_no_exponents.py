"""Issue 46: no figure is printed as an exponent ("1.2e-05") or past three significant
digits ("0.00306 s", "1,234.5 J") on any page or in any report a person reads (HTML,
PDF, the text of `joulestat compare`), on the sample store, whose figures run from
nanograms to megajoules: every one goes through `joulestat.core.units`. Money keeps its
cents ("$74.23", docs/reports.md). CSV and JSON keep full precision for programs."""

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
# A number standing alone: not part of a word, an id, a version, a date or a time of day,
# and not money (dollars keep their cents).
NUMBER = re.compile(r"(?<![\w.,$:/#+-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w.:/-]|,\d)")


def overprecise(text: str) -> list[str]:
    """The numbers in ``text`` printed past three significant digits, or below 0.01
    without an SI prefix ("0.00306"). Trailing zeros of a whole number are not
    significant ("40,000" has two): :func:`joulestat.core.units.sig` writes those. A
    year ("eGRID 2023", "Hackenberg 2015") is a name, not a figure."""
    found = []
    for match in NUMBER.finditer(text):
        whole, fraction = match.group(1).replace(",", ""), match.group(2)
        if fraction is None and whole == match.group(1) and 1900 <= int(whole) < 2100:
            continue
        if fraction is None:
            digits = whole.strip("0")
        else:
            digits = (whole + fraction).lstrip("0")
        small = fraction is not None and 0 < float(whole + "." + fraction) < 0.01
        if len(digits) > 3 or small:
            found.append(match.group(0))
    return found


def _read(text: str) -> list[str]:
    return EXPONENT.findall(text) + overprecise(text)


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sample_store_url(tmp_path_factory.mktemp("no-exponents"))


@pytest.mark.parametrize("page", PAGES)
def test_no_page_writes_an_exponent(sample_url, page, monkeypatch) -> None:
    at = run_page(sample_url, page, monkeypatch)
    texts = [m.value for m in at.metric] + [m.value for m in at.markdown]
    texts += [c.value for c in at.caption] + [h.value for h in at.subheader]
    for table in at.dataframe:  # the cells the pages write as text (numbers are formatted
        frame = table.value      # by the table's column config, in the browser)
        texts += [cell for column in frame.columns for cell in frame[column]
                  if isinstance(cell, str)]
    found = [(t, _read(str(t))) for t in texts if _read(str(t))]
    assert not found, found


def test_no_report_or_comparison_writes_an_exponent(sample_url) -> None:
    engine = make_engine(sample_url)
    try:
        jobs = list_jobs(engine)
        for job in jobs[:6]:
            report = build_report(engine, job.id)
            html = render_html(report)
            assert not _read(re.sub(r"<[^>]+>", " ", html)), (job.name, _read(html))
            pdf = " ".join(page.extract_text() for page in
                           PdfReader(io.BytesIO(render_pdf(report))).pages)
            assert not _read(pdf), (job.name, _read(pdf))
        for by in ("job", "instance_type"):
            text = render_text(compare(load_job_figures(engine), by=by), [], wide=True)
            assert not _read(text), _read(text)
    finally:
        engine.dispose()


def test_the_check_finds_an_exponent() -> None:
    assert EXPONENT.search("CO2e 1.2e-05 g") and EXPONENT.search("3E+06 J")
    assert not EXPONENT.search("bert-e5 job") and not EXPONENT.search("12.0 µg, 3.40 MJ")


def test_the_check_finds_a_figure_past_three_digits() -> None:
    assert overprecise("ttft p50 (s) 0.00306, 1,234.5 J, 40,000,001 tokens, 12.34 W") == [
        "0.00306", "1,234.5", "40,000,001", "12.34"]
    fine = ("2.05 mJ, 1,230 J, 40,000 tokens, 100 %, 0.50 %, $74.23, $1,235, job 17497fd9, "
            "c5.xlarge, v0.1.0, 2026-12-06 07:27:56, 3 h 05 min, 950 steps, eGRID 2023")
    assert overprecise(fine) == []
