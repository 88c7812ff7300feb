"""Where a steady tick's CPU goes, stage by stage, at 10 and 50 jobs, with 10 and 2,000
processes that belong to no job.

Builds the agent's own pipeline (``build_pipeline``: RAPL, the network model,
accounting, the Prometheus node metrics and the store writer on a temporary SQLite
store; OTLP off) over a fake node (``tests/helpers/tick_node.py``: fake RAPL, /proc and
cgroup v2 trees; each job three processes, its registered one busy, one job in five in
a cgroup of its own), ticks it, and prints CPU microseconds per tick by stage
(``time.process_time_ns`` around each stage's function; a stage's figure leaves out the
stages inside it), the files a tick reads and the Python calls it makes. The figures of
docs/architecture.md's "Per-tick budget" come from here.

    .venv/bin/python benchmarks/tick_budget.py                  # the four set-ups, 500 ticks
    .venv/bin/python benchmarks/tick_budget.py --ticks 2000     # steadier figures
    .venv/bin/python benchmarks/tick_budget.py --jobs 50 --unrelated 2000
    PYTHONHASHSEED=0 .venv/bin/python benchmarks/tick_budget.py --json   # to compare runs

"total" is timed without the stage timers, "sum of stages" with them (two CPU-clock
reads and a call a stage, 2 to 3 us each, 15 to 20 a tick). On a shared machine
the figures move by 10 to 15 % from one run to the next, the quietest of several runs
included, so time a cut by alternating runs of the code before and after it (the
code before: ``agent/`` copied to ``OLD/joulestat``, with links to ``migrations/`` and
``dashboard/`` in it, and ``PYTHONPATH=OLD:.``), or compare the files read and the
Python calls, which are exact (they depend on how many ticks ran, through the idle
power's window: compare runs of the same ``--ticks``). The whole agent's cost, beside
CodeCarbon's, is benchmarks/overhead.py and benchmarks/busy_node.py; this one is in
process, for finding where a tick's time goes and measuring a cut before and after.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from joulestat.attribution import accounting as accounting_module  # noqa: E402
from joulestat.attribution.accounting import JobAccounting  # noqa: E402
from joulestat.attribution.idle import IdleBaselines  # noqa: E402
from joulestat.attribution.registry import JobRegistry  # noqa: E402
from joulestat.host.cgroup_jobs import CgroupUnits  # noqa: E402
from joulestat.host.usage import HostUsage  # noqa: E402
from joulestat.outputs.prometheus import NodeMetrics  # noqa: E402
from joulestat.pipeline.pipeline import Pipeline  # noqa: E402
from joulestat.pipeline.sampler import Sampler  # noqa: E402
from joulestat.store.writer import StoreWriter  # noqa: E402
from tests.helpers.tick_node import (  # noqa: E402
    FakeNode,
    counting_calls,
    counting_io,
    fake_node,
)

# (stage, owner, attribute): each stage's own time leaves out the stages it calls.
STAGES: list[tuple[str, Any, str]] = [
    ("pipeline (rest)", Pipeline, "tick"),
    ("sampler (rest)", Sampler, "tick"),
    ("node busy time (/proc/stat)", HostUsage, "_node_busy_s"),
    ("job processes (/proc/<pid>)", HostUsage, "_roots"),
    ("job processes (/proc/<pid>)", HostUsage, "_trees"),
    ("job cgroups", CgroupUnits, "update"),
    ("job cgroups", CgroupUnits, "deltas"),
    ("host usage (rest)", HostUsage, "read"),
    ("idle power", IdleBaselines, "update"),
    ("shares", accounting_module, "attribute"),
    ("job changes and units", JobRegistry, "take_changes"),
    ("accounting (rest)", JobAccounting, "on_tick"),
    ("checkpoint", Pipeline, "checkpoint"),
    ("Prometheus node metrics", NodeMetrics, "on_tick"),
    ("store record", StoreWriter, "on_tick"),
]
SENSOR_STAGE = "sensor reads"
FLUSH_EVERY = 5  # ticks: the store thread flushes every 5 s (--flush-interval)
ORDER = [SENSOR_STAGE, "sampler (rest)", "node busy time (/proc/stat)",
         "job processes (/proc/<pid>)", "job cgroups", "host usage (rest)", "idle power",
         "shares", "job changes and units", "accounting (rest)", "checkpoint",
         "Prometheus node metrics", "store record", "pipeline (rest)"]


class StageTimer:
    """CPU ns by stage, each stage's own (the stages it calls are theirs)."""

    def __init__(self) -> None:
        self.ns: defaultdict[str, int] = defaultdict(int)
        self._stack: list[list[int]] = []
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, label: str, owner: Any, attr: str) -> None:
        real = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        clock, stack, ns = time.process_time_ns, self._stack, self.ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            inner = [0]
            stack.append(inner)
            started = clock()
            try:
                return real(*args, **kwargs)
            finally:
                spent = clock() - started
                stack.pop()
                ns[label] += spent - inner[0]
                if stack:
                    stack[-1][0] += spent

        self._undo.append((owner, attr, real))
        setattr(owner, attr, timed)

    def undo(self) -> None:
        for owner, attr, real in reversed(self._undo):
            setattr(owner, attr, real)
        self._undo.clear()


def ticks_cpu_ns(node: FakeNode, ticks: int, flushes: list[int]) -> int:
    """CPU ns of ``ticks`` ticks; the store is flushed every FLUSH_EVERY ticks between
    them, as the store thread does every 5 s, each flush's CPU added to ``flushes``."""
    spent = 0
    for _ in range(ticks):
        node.step()
        started = time.process_time_ns()
        node.tick()
        spent += time.process_time_ns() - started
        node.ticks += 1
        if node.ticks % FLUSH_EVERY == 0:
            started = time.process_time_ns()
            node.built.writer.flush()
            flushes.append(time.process_time_ns() - started)
    return spent


def measure(node: FakeNode, ticks: int, blocks: int) -> dict[str, float]:
    """CPU us per tick: 'total' untimed, then each stage under the timers; of
    ``blocks`` runs of ``ticks // blocks`` ticks, the quietest (the machine is shared:
    another process's burst only ever adds)."""
    per_block = max(ticks // blocks, 1)
    flushes: list[int] = []
    figures: dict[str, float] = {
        "total": min(ticks_cpu_ns(node, per_block, flushes) for _ in range(blocks))
        / per_block / 1000}
    timer = StageTimer()
    for label, owner, attr in STAGES:
        timer.wrap(label, owner, attr)
    for sensor_class in {type(sensor) for sensor in node.pipeline.sampler.sensors}:
        timer.wrap(SENSOR_STAGE, sensor_class, "read")
    best: dict[str, float] = {}
    try:
        for _ in range(blocks):
            timer.ns.clear()
            ticks_cpu_ns(node, per_block, flushes)
            for label in [*ORDER, "sum of stages"]:
                ns = (sum(timer.ns.values()) if label == "sum of stages"
                      else timer.ns.get(label, 0))
                best[label] = min(best.get(label, ns), ns)
    finally:
        timer.undo()
    figures.update({label: ns / per_block / 1000 for label, ns in best.items()})
    flushes.sort()
    figures["store flush (store thread)"] = flushes[len(flushes) // 2] / FLUSH_EVERY / 1000
    return figures


def counts(node: FakeNode, base: Path) -> dict[str, float]:
    """Files read and Python calls per tick (calls over 10 ticks, with the flushes
    between them: the idle power is recomputed one tick in ten, and the first tick
    after a flush keys the store's new buffer afresh)."""
    node.step()
    with counting_io(base) as io:
        node.tick()
    calls = 0
    for _ in range(10):
        node.step()
        with counting_calls() as counted:
            node.tick()
        calls += sum(counted.values())
        node.ticks += 1
        if node.ticks % FLUSH_EVERY == 0:
            node.built.writer.flush()
    return {"files read": sum(io.reads.values()), "Python calls": calls / 10}


def run(jobs: int, unrelated: int, ticks: int, blocks: int) -> dict[str, float]:
    real_clock = time.clock_gettime_ns

    def install(clock: Callable[[int], int]) -> None:
        time.clock_gettime_ns = clock  # type: ignore[assignment]

    try:
        with tempfile.TemporaryDirectory(prefix="joulestat-tick-budget-") as tmp, \
                fake_node(Path(tmp), jobs, unrelated, install) as node:
            return {**measure(node, ticks, blocks), **counts(node, Path(tmp))}
    finally:
        time.clock_gettime_ns = real_clock  # type: ignore[assignment]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=500, help="ticks timed per set-up")
    parser.add_argument("--blocks", type=int, default=5,
                        help="the ticks are timed in this many runs; the quietest counts")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON, one object per set-up")
    parser.add_argument("--jobs", type=int, nargs="*", default=[10, 50])
    parser.add_argument("--unrelated", type=int, nargs="*", default=[10, 2000],
                        help="processes that belong to no job")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the fake instance type is not in the catalog

    setups = [(jobs, unrelated) for jobs in args.jobs for unrelated in args.unrelated]
    results = [run(jobs, unrelated, args.ticks, args.blocks) for jobs, unrelated in setups]
    if args.json:
        print(json.dumps([{"jobs": jobs, "unrelated": unrelated, **figures}
                          for (jobs, unrelated), figures in zip(setups, results, strict=True)]))
        return 0
    width = max(len(label) for label in ORDER) + 2
    header = "".join(f"{f'{j} jobs, {u} other':>22}" for j, u in setups)
    print(f"CPU us per tick (the quietest of {args.blocks} runs of "
          f"{args.ticks // args.blocks} ticks; Python {sys.version.split()[0]})")
    print(f"{'stage':<{width}}{header}")
    for label in [*ORDER, "sum of stages", "total"]:
        if label == "sum of stages":
            print("-" * (width + 22 * len(setups)))
        print(f"{label:<{width}}" + "".join(f"{r[label]:>22.0f}" for r in results))
    print(f"{'store flush, per tick':<{width}}"
          + "".join(f"{r['store flush (store thread)']:>22.0f}" for r in results)
          + "   (the store thread's, every 5 ticks; median)")
    for label in ("files read", "Python calls"):
        print(f"{label + ' per tick':<{width}}" + "".join(f"{r[label]:>22.0f}" for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
