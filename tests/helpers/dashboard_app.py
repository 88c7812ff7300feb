"""The dashboard's app file and its pages, for tests that run them with Streamlit's AppTest."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from streamlit.testing.v1 import AppTest

from joulestat.demo import sample_store as sample
from joulestat.store import migrate
from joulestat.store.engine import make_engine

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = ("pages/overview.py", "pages/jobs.py", "pages/job_detail.py", "pages/compare.py",
         "pages/load_curve.py")
TITLES = {"pages/overview.py": "Overview", "pages/jobs.py": "Jobs",
          "pages/job_detail.py": "Job detail", "pages/compare.py": "Compare",
          "pages/load_curve.py": "Load curve"}


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def shown(markdown: str) -> str:
    """The text a Markdown source ``markdown`` shows, for the lines the pages escape with
    ``fmt.md``: CommonMark's backslash escapes of ASCII punctuation undone and the word
    joiners that stop bare-URL links removed (emphasis markers are left to the caller)."""
    return _ESCAPED.sub(r"\1", markdown).replace("\u2060", "")


def hold_lease(engine: Engine, node: str, flush_interval_s: float | None,
               lease_s: float = 3600.0) -> None:
    """``node``'s row as a live writer flushing every ``flush_interval_s`` leaves it: its
    lease taken and held ``lease_s`` from now (``None`` for ``flush_interval_s``: a
    writer that does not say)."""
    from joulestat.store.durability import LEASE_S, Writer, acquire

    with engine.begin() as connection:  # acquire holds it LEASE_S from the time it is given
        acquire(connection, node, Writer(f"test-boot:{node}", "test-host", "agent", None,
                                         flush_interval_s), time.time() + lease_s - LEASE_S,
                "test-boot", Path("/nonexistent"))


def give_up_lease(engine: Engine, node: str) -> None:
    """``node``'s writer gave its lease up, as a stopped agent does."""
    from joulestat.store.durability import Writer, release

    with engine.begin() as connection:
        release(connection, node, Writer(f"test-boot:{node}", "test-host", "agent"))


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


def sample_store(folder: Path) -> tuple[str, Engine]:
    """A migrated SQLite store in ``folder`` holding the sample data
    (:mod:`joulestat.demo.sample_store`), ended a minute ago so every "up to now"
    window holds all of it: its URL and an engine the caller disposes of."""
    url = f"sqlite:///{folder / 'sample.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    sample.fill(engine, end_s=time.time() - 60)
    return url, engine


def sample_store_url(folder: Path) -> str:
    """:func:`sample_store`, for tests that only open it by URL."""
    url, engine = sample_store(folder)
    engine.dispose()
    return url
