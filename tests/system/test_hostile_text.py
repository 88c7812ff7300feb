"""Text from users stays text where people read it: the CSV a spreadsheet opens
(``joulestat report --all --format csv``, the real CLI) and the dashboard's pages in
headless Chromium (the real ``joulestat dashboard``).

The names are an attacker's: spreadsheet formulas (OWASP's CSV injection examples) and
Markdown/HTML that Streamlit would otherwise render as a live link and a remote image
on every viewer's screen. The store is written through the store API as the agent
writes it (:mod:`tests.helpers.honest_store`), bypassing any check of the job API, so
what is tested is the output side alone.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulestat.dashboard import fmt
from tests.helpers import honest_store
from tests.helpers.agent_process import agent_env, read_cli
from tests.helpers.browser import Browser, chromium, serve

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# The columns of one number each (docs/reports.md): numbers, never prefixed.
NUMERIC = ("duration_s", "nodes", "energy_cpu_j", "energy_dram_j", "energy_accelerator_j",
           "energy_net_j", "energy_other_j", "energy_total_j", "energy_kwh",
           "dynamic_energy_j", "idle_energy_j", "co2e_g", "embodied_co2e_g", "total_co2e_g",
           "carbon_intensity_g_per_kwh", "pue", "cost_usd")
HOSTILE_NAMES = ('=HYPERLINK("http://evil","x")', "=cmd|'/C calc'!A0", "+1+2", "-2+3",
                 "@SUM(1+1)", "\tpadded", "\rreturned")
HOSTILE_LABELS = {"owner": "+cmd", "team": "-1+1", "contact": "@evil", "plain": "=1+1"}
MARKDOWN_NAME = ("[click](http://evil.example/link) ![x](http://evil.example/x.png) "
                 "<b>bold</b> **strong** <img src=http://evil.example/raw.png> "
                 "http://evil.example/bare :red[red]")
MARKDOWN_LABEL = "[label](http://evil.example/label)"
EVIL_HOST = "evil.example"
# The tests of the module's one dashboard and Chromium run on one worker, which starts
# them once (pytest-xdist --dist loadgroup).
PAGE = pytest.mark.xdist_group("test_hostile_text")


def hostile_runs(start_s: float) -> list[honest_store.Run]:
    """One short laptop job per hostile name, each with the hostile labels, counting a
    unit whose name starts a formula too (it leads the ``work_units`` cells)."""
    return [honest_store.Run(f"job-{i}", name, "training", honest_store.LAPTOP,
                             start_s + 20 * i, 5.0, {"cpu": 12.0}, HOSTILE_LABELS,
                             "-sample", 3.0)
            for i, name in enumerate(HOSTILE_NAMES)]


def test_report_all_csv_has_no_cell_that_starts_a_formula(tmp_path: Path) -> None:
    """Acceptance 3 (CSV): every text cell that would start a formula begins with ``'``,
    its text kept after it; numeric columns stay numbers."""
    path = tmp_path / "hostile.db"
    engine = honest_store.new_store(path)
    for run in hostile_runs(time.time() - 3600):
        honest_store.write_run(engine, run)
    engine.dispose()
    written = tmp_path / "all.csv"  # a file read as is: a pipe in text mode turns \r to \n
    result = read_cli("report", "--all", "--format", "csv", "-o", str(written),
                      env=agent_env(JOULESTAT_DB=f"sqlite:///{path}"))
    assert result.returncode == 0, result.stderr
    with written.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == len(HOSTILE_NAMES)
    for row in rows:
        for column, cell in row.items():
            assert not cell.startswith(FORMULA_STARTS), (column, cell)
        for column in NUMERIC:
            if row[column]:
                float(row[column])  # a number as written, no quote in front
    assert sorted(row["name"] for row in rows) == sorted(f"'{n}" for n in HOSTILE_NAMES)
    labels = rows[0]["labels"]
    for key, value in HOSTILE_LABELS.items():
        assert f"{key}={value}" in labels  # mid-cell text is left as it was
    assert {row["work_units"].split("=")[0] for row in rows} == {"'-sample"}
    assert {row["energy_cpu_j"] for row in rows} == {"60"}  # 12 W for 5 s


@pytest.fixture(scope="module")
def markdown_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("hostile-browser")
    path = folder / "markdown.db"
    engine = honest_store.new_store(path)
    honest_store.write_run(engine, honest_store.Run(
        "md-job", MARKDOWN_NAME, "training", honest_store.LAPTOP, time.time() - 1800, 30.0,
        {"cpu": 15.0}, {"note": MARKDOWN_LABEL}, "sample", 10.0))
    engine.dispose()
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def page(markdown_store: str) -> Iterator[tuple[str, Browser]]:
    with serve(markdown_store) as base, chromium() as browser:
        yield base, browser


def links_and_images(browser: Browser) -> dict[str, list[str]]:
    """Every link and image on the page that points at the attacker's host (the page's
    own anchors, whose query may quote it, do not), and the tags the name's Markdown or
    HTML would make."""
    found = browser.evaluate(f"""(() => {{
        const evil = (s) => {{ try {{ return new URL(s).hostname.endsWith('{EVIL_HOST}'); }}
                               catch (e) {{ return false; }} }};
        return {{
          links: [...document.querySelectorAll('a')].map(a => a.href).filter(evil),
          images: [...document.querySelectorAll('img')].map(i => i.src).filter(evil),
          bold: [...document.querySelectorAll('b, strong')].map(b => b.textContent)
                  .filter(t => t === 'bold' || t === 'strong'),
          red: [...document.querySelectorAll('span')].filter(
                  s => s.textContent === 'red' && s.style.color).map(s => s.textContent),
        }};
    }})()""")
    assert isinstance(found, dict)
    return found


NO_MARKUP = {"links": [], "images": [], "bold": [], "red": []}


def wait_for_text(browser: Browser, expected: list[str], timeout_s: float = 30) -> str:
    """The page's text once every expected text is in it, read as a person reads it:
    without the invisible word joiner that keeps bare URLs from linking
    (:data:`joulestat.dashboard.fmt.WORD_JOINER`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = (browser.evaluate("document.body.innerText") or "").replace(fmt.WORD_JOINER, "")
        if all(t in text for t in expected):
            return text
        if time.monotonic() > deadline:
            missing = [t for t in expected if t not in text]
            raise AssertionError(f"never showed {missing}; page text:\n{text[:3000]}")
        time.sleep(0.25)


@PAGE
def test_a_markdown_name_shows_as_text_on_job_detail(page: tuple[str, Browser],
                                                     tmp_path: Path) -> None:
    """Acceptance 3 (Chromium): the name and a label, as typed, on Job detail; no link,
    no image, no bold from them."""
    base, browser = page
    browser.open(f"{base}/job_detail?job=md-job", ["Power over time (", "Download"])
    text = wait_for_text(browser, [f"{MARKDOWN_NAME} · training · ended",
                                   f"note={MARKDOWN_LABEL}"])
    assert links_and_images(browser) == NO_MARKUP
    assert "Traceback" not in text
    shot = tmp_path / "job-detail-markdown-name.png"
    browser.screenshot(shot)
    assert shot.stat().st_size > 20_000


@PAGE
def test_a_markdown_name_shows_as_text_on_jobs(page: tuple[str, Browser]) -> None:
    """The Jobs page's picker shows the name as typed (the table is a canvas: text)."""
    base, browser = page
    browser.open(f"{base}/jobs", ["1 jobs", "Open detail"])
    picked = browser.evaluate("[...document.querySelectorAll('[data-testid=stSelectbox] "
                              "input')].filter(i => i.getAttribute('aria-label') === "
                              "'Open a job').map(i => i.value)")
    assert picked and picked[0].startswith(f"{MARKDOWN_NAME} · "), picked
    assert links_and_images(browser) == NO_MARKUP


@PAGE
def test_a_markdown_job_reference_in_the_url_shows_as_text(page: tuple[str, Browser]) -> None:
    """A link someone sends (``?job=`` Markdown) is named in the warning as typed."""
    base, browser = page
    wanted = "[x](http://evil.example/q)"
    browser.open(f"{base}/job_detail?job=%5Bx%5D(http%3A%2F%2Fevil.example%2Fq)", ["Job"])
    wait_for_text(browser, [f"no job with id, id prefix or name '{wanted}'"])
    assert links_and_images(browser) == NO_MARKUP
