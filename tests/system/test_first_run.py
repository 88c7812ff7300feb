"""Issue 24: the README's first ten minutes, as a new user lives them. The agent as
`make run` starts it (the embedded SQLite default in the data directory, no instance
type given, so `local`), the dashboard beside it on a port of its own, then `joulestat
demo`. What the demo prints and every dashboard page are read in headless Chromium at
1,400 px; the screenshots go to docs/screenshots/first-run-*.png when
``JOULESTAT_SAVE_SCREENSHOTS`` is set (the README's come from here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from joulestat.reports.idle import policy_words
from joulestat.store.engine import make_engine
from joulestat.store.jobs import list_jobs
from tests.helpers.agent_process import JOULESTAT, agent_env, running_agent
from tests.helpers.browser import chromium, serve

pytestmark = pytest.mark.slow

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def compare_rows(out: str) -> list[str]:
    """The table rows `joulestat compare` printed (not its sentences)."""
    return [line for line in out.splitlines()
            if line.startswith(("setup=", "concurrency=")) and " vs " not in line]


def test_make_run_then_the_demo_is_priced_and_every_page_reads_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = agent_env(XDG_DATA_HOME=str(data))
    store = f"sqlite:///{data / 'joulestat' / 'joulestat.db'}"  # make run's default store
    upgrade = subprocess.run([JOULESTAT, "db", "upgrade"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert upgrade.returncode == 0, upgrade.stderr
    shots: list[Path] = []
    with running_agent(tmp_path, "--db", store, env=env) as agent, \
            serve(store, data_home=data) as base:
        demo = subprocess.run([JOULESTAT, "demo", "--seconds", "2", "--backend", "numpy"],
                              env={**env, "JOULESTAT_AGENT_URL": agent.api_url},
                              capture_output=True, text=True, timeout=300)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "measured by the agent at " + agent.api_url in demo.stderr
        out = demo.stdout
        rows = compare_rows(out)
        assert len(rows) == 5 and all("$" in row for row in rows), out  # every row priced
        # ... say the idle policy the agent recorded, and carry dynamic energy per unit
        # (its lines wrapped at 100 columns: read as one text)
        assert " ".join(out.split()).count(policy_words("share", jobs=True)) == 2, out
        headers = [line for line in out.splitlines()
                   if line.startswith(("setup ", "concurrency "))]
        assert len(headers) == 2 and all(" dynamic " in h for h in headers), out
        engine = make_engine(store)
        jobs = list_jobs(engine)
        engine.dispose()
        assert {itype for j in jobs for _n, itype in j.nodes} == {"demo-1vcpu", "demo-2vcpu"}
        [printed] = [line.strip() for line in out.splitlines() if "/compare?" in line]
        assert printed.startswith(base)  # the dashboard that runs, not the default port
        serve_job = max((j for j in jobs if j.name == "demo-serve"),
                        key=lambda j: int(j.labels["concurrency"]))
        pages = [
            ("first-run-compare", printed, [" vs setup=demo-",  # either may be faster
                                            "energy per sample", "$"]),
            ("first-run-compare-serving",
             f"{base}/compare?kind=inference&unit=inference&by=label:concurrency"
             "&period=All%20time", ["concurrency=16 vs concurrency=1: ×", "$"]),
            ("first-run-overview", f"{base}/", ["Jobs running", "Power now"]),
            ("first-run-jobs", f"{base}/jobs", [f"{len(jobs)} jobs",  # the table is a canvas
                                                "Select a row to open the job"]),
            ("first-run-job-detail", f"{base}/job_detail?job={serve_job.id}",
             ["demo-serve · inference · ended", "Power over time (", "Energy per inference"]),
            ("first-run-load-curve", f"{base}/load_curve",
             ["Energy per inference (", "demo-1vcpu", "Job name"]),
        ]
        with chromium() as browser:
            for name, url, expected in pages:
                browser.open(url, expected)
                shot = tmp_path / f"{name}.png"
                browser.screenshot(shot)
                shots.append(shot)
    assert all(shot.stat().st_size > 10_000 for shot in shots)
    if os.environ.get("JOULESTAT_SAVE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copyfile(shot, SCREENSHOTS / shot.name)
