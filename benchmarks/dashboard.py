"""Server time of the dashboard's heaviest pages on a store of 10,000 jobs over 30 days.

Fills a SQLite store through the agent's own path (:mod:`joulestat.demo.sample_store`: every tick
through ``attribute()`` and ``StoreWriter``, rollups and pruning by ``maintain()`` on a
7-day raw retention), then runs the Jobs and Compare pages with Streamlit's AppTest
and prints the time each run took on the server, median of several:

* cold: the ten-second query cache emptied first (a first visit, or the first after
  the cache expired) - the figure to hold against the 1 s target;
* warm: a rerun within ten seconds (every widget change), served from the cache.

Each figure is one rerun of the page in a session that has run it once already, as a
server that has started answers it; AppTest's own start-up (a scan of the installed
packages for components, about 0.5 s per new AppTest) is left out.

Prints figures only; no assertions.

    .venv/bin/python benchmarks/dashboard.py [--jobs 10000] [--days 30] [--tick 60]
        [--runs 5] [--db sqlite:////tmp/bench.db]   # an existing --db is reused as is

Ticks default to 60 s so the fill takes minutes; with 1 s ticks the raw tables of the
last 7 days would be 60 times larger (the rolled-up 23 days are the same either way).
The Jobs and Compare pages would not notice: they read the job totals and only the
minutes of raw rows after them. The Overview (and Job detail) read raw ticks within
the retention, so their figures here are the 60 s case.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlalchemy import text  # noqa: E402

from joulestat.demo import sample_store as sample  # noqa: E402
from joulestat.store import migrate  # noqa: E402
from joulestat.store.engine import make_engine  # noqa: E402

APP = REPO / "dashboard" / "app.py"
# (label, page, widget values set before the run)
PAGES = (
    ("Jobs (last 7 days)", "pages/jobs.py", {}),
    ("Jobs (all 30 days)", "pages/jobs.py", {"jobs_period": "All time"}),
    ("Compare (all time)", "pages/compare.py", {}),
    ("Overview (24 h)", "pages/overview.py", {}),
)


def fill(url: str, jobs: int, days: float, tick_s: float) -> None:
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.connect() as connection:
        existing = connection.execute(text("SELECT count(*) FROM jobs")).scalar_one()
    if existing:
        print(f"reusing {url}: {existing} jobs already there")
        engine.dispose()
        return
    started = time.perf_counter()
    sample.fill(engine, end_s=time.time() - 60, hours=days * 24, jobs=jobs, tick_s=tick_s,
                raw_retention_s=7 * 86400, maintain_every_s=3600)
    with engine.connect() as connection:
        counts = {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                  for table in ("jobs", "tick_energy", "minute_energy", "job_energy",
                                "job_minute_energy", "job_units",
                                "job_minute_units")}
    engine.dispose()
    print(f"filled {url} in {time.perf_counter() - started:.0f} s: "
          + ", ".join(f"{t} {n:,}" for t, n in counts.items()))


def time_page(page: str, widgets: dict[str, str],
              runs: int) -> tuple[list[float], list[float]]:
    """Cold and warm server times of ``runs`` reruns of one page in one session.

    One AppTest per page, run once untimed first: a new AppTest scans every installed
    package for Streamlit components on its first run (~0.5 s here), which a real
    server does once at start-up, not per page view.
    """
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=300)
    for key, value in widgets.items():
        at.session_state[key] = value
    at.switch_page(page)
    at.run()
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(runs):
        st.cache_data.clear()
        for bucket in (cold, warm):
            started = time.perf_counter()
            at.run()
            bucket.append(time.perf_counter() - started)
            if at.exception:
                raise RuntimeError(f"{page}: {at.exception[0].value}")
    return cold, warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--tick", type=float, default=60.0, help="seconds per tick")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", help="store URL (default: a new SQLite file in /tmp)")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{Path(tempfile.mkdtemp(prefix='joulestat-bench-')) / 'b.db'}"
    fill(url, args.jobs, args.days, args.tick)
    os.environ["JOULESTAT_DB"] = url
    logging.disable(logging.WARNING)  # AppTest's "missing ScriptRunContext" chatter
    time_page(PAGES[0][1], {}, 1)  # imports and first connection, not counted
    print(f"{'page':<20} {'cold median':>12} {'cold min':>9} {'warm median':>12}  (s, "
          f"{args.runs} runs)")
    for label, page, widgets in PAGES:
        cold, warm = time_page(page, widgets, args.runs)
        print(f"{label:<20} {statistics.median(cold):>12.3f} {min(cold):>9.3f} "
              f"{statistics.median(warm):>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
