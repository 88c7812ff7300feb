"""The dashboard's app file and its pages, for tests that run them with Streamlit's AppTest."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = ("pages/overview.py", "pages/jobs.py", "pages/job_detail.py", "pages/compare.py",
         "pages/load_curve.py")
TITLES = {"pages/overview.py": "Overview", "pages/jobs.py": "Jobs",
          "pages/job_detail.py": "Job detail", "pages/compare.py": "Compare",
          "pages/load_curve.py": "Load curve"}


def run_page(url: str, page: str, monkeypatch: pytest.MonkeyPatch, **query: str) -> AppTest:
    """``page`` of the app over the store at ``url``, with ``query`` as its query
    parameters, run once; it must raise nothing."""
    monkeypatch.setenv("JOULESTAT_DB", url)
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at
