"""The real ``joulestat dashboard`` in headless Chromium: every page renders the data,
and the reports open as a manager would open them.

Streamlit draws its pages in the browser over a websocket after the HTML has loaded,
so a one-shot ``--dump-dom`` or ``--screenshot`` may capture an empty shell. The test
therefore drives Chromium through its DevTools protocol (the ``websockets`` client
Streamlit already depends on): load a page, poll the rendered text until the expected
figures appear, then take a full-page screenshot. The store is the sample
(:mod:`joulestat.demo.sample_store`) plus :mod:`tests.helpers.honest_store` (a steady laptop job,
runs told apart by a label, an imported VM estimate with its profile) and a CodeCarbon
CSV written by CodeCarbon's own tracker, imported with its CO2e kept. The HTML report is
opened in Chromium and the PDF rasterised with ``pdftoppm``. Screenshots go to the
pytest tmp dir, and to docs/screenshots/ when ``JOULESTAT_SAVE_SCREENSHOTS`` is set.

Needs Debian's ``chromium`` (and ``poppler-utils`` for the PDF) packages. Without them
the test is skipped with that reason, except in CI (``CI=true``), where a missing
browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulestat.dashboard import fmt
from joulestat.demo import sample_store as sample
from joulestat.reports.html_report import render_html
from joulestat.reports.importer import import_file
from joulestat.reports.model import build_report
from joulestat.reports.pdf_report import render_pdf
from joulestat.store.engine import make_engine
from joulestat.store.jobs import JobSummary, list_jobs
from tests.helpers import honest_store
from tests.helpers.browser import VIEWER_TZ, Browser, chromium, serve
from tests.helpers.codecarbon_run import codecarbon_script
from tests.helpers.dashboard_app import hold_lease, sample_store

# One worker fills the store, serves it and starts Chromium once for the module
# (pytest-xdist --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_dashboard_browser")]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"


CODECARBON_RUN = codecarbon_script("mlp-train", seconds=4)


def codecarbon_csv(folder: Path) -> Path:
    """An emissions.csv written by CodeCarbon's own tracker (a 4-second busy loop)."""
    run = subprocess.run([sys.executable, "-c", CODECARBON_RUN], cwd=folder,
                         capture_output=True, text=True, timeout=180,
                         env={**os.environ, "HOME": str(folder)})
    assert run.returncode == 0, run.stderr
    return folder / "emissions.csv"


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, JobSummary]]:
    folder = tmp_path_factory.mktemp("browser")
    url, engine = sample_store(folder)
    # The sample's agents as live ones flushing every 10 min: their nodes report (and
    # have power now) for half an hour after their newest tick, a minute ago.
    for name in sample.NODES:
        hold_lease(engine, name, 600.0)
    honest_store.fill(engine, folder, start_s=time.time() - 2 * 3600)
    result = import_file(engine, codecarbon_csv(folder))
    assert result.kind == "codecarbon" and result.nodes == 1
    jobs = {j.id: j for j in list_jobs(engine)}
    engine.dispose()
    return url, jobs


@pytest.fixture(scope="module")
def server(filled: tuple[str, dict[str, JobSummary]]) -> Iterator[str]:
    with serve(filled[0]) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as page:
        yield page


def pages(jobs: dict[str, JobSummary]) -> list[tuple[str, str, list[str]]]:
    [multi] = [j for j in jobs.values() if j.name == "llama-7b-finetune"]
    [starved] = [j for j in jobs.values() if j.name == "resnet50-jpeg-decode"]
    [codecarbon] = [j for j in jobs.values() if j.name == "codecarbon:mlp-train"
                    and j.id != "codecarbon:cc-run-1"]  # the tracker's own run
    per_sample = fmt.energy(multi.total_j / multi.units["sample"])
    dynamic_per_sample = fmt.energy(sum(multi.dynamic_j.values()) / multi.units["sample"])
    # A fresh server's first request deep-links a page with a query parameter: it must
    # still run inside the app's navigation (see joulestat.dashboard.ui.enter).
    return [
        ("job-detail", f"/job_detail?job={multi.id}", [
            "llama-7b-finetune · training · ended", "trainer-p4d-1 (p4d.24xlarge)",
            "loader-c5-1 (c5.4xlarge)", "Energy per sample", per_sample,
            "Dynamic energy per sample", dynamic_per_sample,
            "Idle policy share: the node's idle power is split",  # as the sample records
            "accelerator: measured (nvml_energy)", "Power over time (", "Report (PDF)",
            "CO2e (operational)", "Embodied CO2e"]),
        ("overview", "/", ["Jobs running", "trainer-p4d-1 (p4d.24xlarge)",
                           "inf2-1 (inf2.xlarge)", "kWh", "Power now", "CO2e (operational)",
                           "Imported nodes have no power now", f"Times in {VIEWER_TZ}",
                           # honest_store's nodes last ticked two hours ago
                           "Silent nodes (no tick in their last 3 flushes, or their "
                           "agent stopped) have no power now: gpu-1, laptop-1, vm-1."]),
        ("jobs", "/jobs", [f"{len(jobs)} jobs", "Select a row to open the job",
                           "Open detail", "CO2e is operational"]),
        ("job-detail-cpu-bound", f"/job_detail?job={starved.id}", [
            "CPU bottleneck on gpu-a10g-1 (g5.xlarge)"]),
        ("job-detail-steady", "/job_detail?job=steady", [
            "steady · training · ended", "Energy per sample", "300 mJ",
            "Idle policy not recorded",  # honest_store writes no agent labels
            "Embodied CO2e", "Work rate so far (samples/s)"]),
        ("job-detail-imported", "/job_detail?job=vm-ramp", [
            "vm-ramp · training · ended", "cpu: estimated (import:joulestat/model:ccf-vcpu)",
            "Imported from a file"]),
        ("job-detail-codecarbon", f"/job_detail?job={codecarbon.id}", [
            "CO2e (CodeCarbon's own)", "joulestat recomputed",
            "cpu: not stated (import:codecarbon)"]),
        ("compare", "/compare", [" vs ", "throughput", "energy per request",
                                 # a delta within the rows' bounds is said so (issue 27)
                                 "dynamic energy", "not distinguishable from the baseline",
                                 # the sample's jobs record share, honest_store's none
                                 "Idle policies differ", "idle policy",
                                 "Sizing for a service level", "compare them with measured "
                                 "rows with care", " vs $"]),
        ("compare-by-label", "/compare?kind=inference&unit=request&by=label:concurrency"
                             "&baseline=concurrency%3D1%20%C2%B7%20g5.xlarge", [
            "concurrency=16 · g5.xlarge vs concurrency=1 · g5.xlarge:", "by label",
            "a row is one value of concurrency on one setup", "Sizing for a service level"]),
        ("load-curve", "/load_curve", ["Energy per request (", "Rate (requests/s)",
                                       "inf2.xlarge", "c6i.2xlarge (estimated)",
                                       "Dashed lines are not read from a hardware counter",
                                       "Leave out runs"]),
    ]


def save(shots: list[Path]) -> None:
    if os.environ.get("JOULESTAT_SAVE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copyfile(shot, SCREENSHOTS / shot.name)


def test_every_page_renders_its_data_in_a_real_browser(filled, server, browser, tmp_path):
    _url, jobs = filled
    saved = []
    for name, path, expected in pages(jobs):
        # The app's own navigation (titles), never Streamlit's file-name sidebar.
        text = browser.open(server + path, [*expected, "Job detail", "Load curve"])
        assert "load curve" not in text and browser.evaluate("location.pathname") == (
            path.split("?")[0]), text[:500]
        errors = browser.evaluate("document.querySelectorAll("
                                  "'[data-testid=stException], [data-testid=stAlertContentError]'"
                                  ").length")
        assert errors == 0 and "Traceback" not in text, text[:2000]
        shot = tmp_path / f"{name}.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
        saved.append(shot)
    save(saved)


def test_the_reports_open_as_a_manager_opens_them(filled, browser, tmp_path):
    """The HTML report in Chromium and the PDF through pdftoppm, of the imported VM job
    (estimated energy, its power profile, every estimated factor in the notes)."""
    url, _jobs = filled
    engine = make_engine(url)
    report = build_report(engine, "vm-ramp")
    engine.dispose()
    page = tmp_path / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    text = browser.open(page.as_uri(), [report["headline"], "Notes: unknowns and estimated",
                                        "is estimated (import:joulestat/model:ccf-vcpu)"])
    assert "None: every figure is known" not in text
    shot = tmp_path / "report-html.png"
    browser.screenshot(shot)
    shots = [shot]
    # A CodeCarbon run: each class names its own sources, CodeCarbon's figures once.
    engine = make_engine(url)
    codecarbon = build_report(engine, "codecarbon:cc-run-1")
    engine.dispose()
    page = tmp_path / "report-codecarbon.html"
    page.write_text(render_html(codecarbon), encoding="utf-8")
    text = browser.open(page.as_uri(), [
        "60 % estimated (import:codecarbon/model:codecarbon-ram), 40 % unstated "
        "(import:codecarbon).", "17.4 mg over 550 mWh"])
    assert "codecarbon_emissions_kg" not in text and "e-05" not in text
    shot = tmp_path / "report-html-codecarbon.png"
    browser.screenshot(shot)
    shots.append(shot)
    pdftoppm = shutil.which("pdftoppm")
    if pdftoppm is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("pdftoppm (poppler-utils) not installed; CI must provide it")
    else:
        pdf = tmp_path / "report.pdf"
        pdf.write_bytes(render_pdf(report))
        subprocess.run([pdftoppm, "-png", "-r", "70", str(pdf), str(tmp_path / "report-pdf")],
                       check=True, timeout=60)
        pages_png = sorted(tmp_path.glob("report-pdf-*.png"))
        assert pages_png
        shots += pages_png
    save(shots)


def test_an_empty_store_shows_how_to_start(tmp_path, browser):
    missing = tmp_path / "not-yet.db"
    with serve(f"sqlite:///{missing}") as base:
        text = browser.open(base + "/", ["No measurements yet", "joulestat agent --db",
                                         "joulestat run --name"])
        assert "Traceback" not in text
        shot = tmp_path / "empty-store.png"
        browser.screenshot(shot)
    assert not missing.exists()  # looking never creates the store
    save([shot])
