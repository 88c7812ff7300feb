"""A store of three serving setups with known figures, filled through the real store
writer (tests/helpers/compare_store.py): per setup, 1,000 output tokens, an energy, and a
time-to-first-token histogram of 1,000 requests at one latency. ``a`` (inf2.xlarge) is
the cheapest per token but slow to first token (0.8 s), ``b`` (g5.xlarge) meets 0.5 s at
2 J/token, ``c`` (p4d.24xlarge) meets it at 3 J/token."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers import compare_store
from tests.helpers.store_jobs import make_job

SETUPS = (("a", "inf2.xlarge", 1.0, 0.8), ("b", "g5.xlarge", 2.0, 0.2),
          ("c", "p4d.24xlarge", 3.0, 0.09))  # (name, instance type, J per token, TTFT s)
BOUNDS_S = (0.1, 0.25, 0.5, 1.0, 2.5)
TOKENS = 1000.0


def histogram(value_s: float, count: float) -> dict[str, Any]:
    """``count`` observations of ``value_s``, as the agent stores a histogram."""
    return {"buckets": [[b, count if value_s <= b else 0.0] for b in BOUNDS_S]
            + [["+Inf", count]], "sum": value_s * count, "count": count}


def serving_store(url: str) -> None:
    engine = make_engine(url)
    migrate.upgrade(engine)
    for i, (name, itype, j_per_token, ttft_s) in enumerate(SETUPS):
        job = replace(make_job(f"job-{name}", compare_store.T0 + i * 10_000, {"setup": name}),
                      name=f"serve-{name}", kind="inference",
                      latency={"m": {"ttft": histogram(ttft_s, 1000.0)}})
        # 4 ticks of GPU energy adding up to j_per_token x TOKENS (10 J of CPU nobody gets)
        compare_store.run_job(engine, compare_store.node(f"node-{name}", itype), job, 4,
                              j_per_token * TOKENS / 4, {"output_token": TOKENS / 4})
    engine.dispose()


LEVELS = ((1, 3.0, 0.05), (2, 2.0, 0.2), (4, 1.5, 0.8))  # (concurrency, J/token, TTFT s)


def load_store(url: str) -> None:
    """One setup (g5.xlarge) served at concurrency 1, 2 and 4: less energy per token and
    a longer time to first token as the load grows (the Load curve's trade-off)."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    for i, (level, j_per_token, ttft_s) in enumerate(LEVELS):
        job = replace(make_job(f"level-{level}", compare_store.T0 + i * 10_000,
                               {"concurrency": str(level)}),
                      name="serve", kind="inference",
                      latency={"m": {"ttft": histogram(ttft_s, 1000.0)}})
        compare_store.run_job(engine, compare_store.node("node-g5", "g5.xlarge"), job, 4,
                              j_per_token * TOKENS / 4, {"output_token": TOKENS / 4})
    engine.dispose()
