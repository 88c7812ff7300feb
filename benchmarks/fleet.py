"""A fleet in one PostgreSQL: the dashboard's pages and ``joulestat compare`` over it.

Fills a throwaway PostgreSQL (tests/helpers/pg.py), or ``--db``, with ``--nodes`` nodes
of ``--jobs`` running jobs each over ``--days``, through the agent's own ``StoreWriter``
(simulated time, as fast as the writer takes it: ``record`` every tick, ``maybe_flush``
after it, ``maintain`` every simulated ``--maintain`` seconds), so the store holds what
agents would have written: raw ticks for the raw retention, job windows turned into
minute rollups and job totals, unit counts. Each node runs ``--jobs`` jobs at a time,
each ``--job-hours`` long, started in a staggered way, so the fleet holds about
``nodes x jobs x days x 24 / job-hours`` jobs. Then prints, for the Overview, Jobs, Job
detail and Compare pages (Streamlit's AppTest, as benchmarks/dashboard.py), the server
time of a run with the query cache emptied (cold) and of a rerun (warm), median of
``--runs``; and the time of ``joulestat compare`` over every job of the fleet. Says
how many jobs it holds and how many of them run.

The issue's (28) scale is 1,000 nodes x 7 days x 50 jobs at 1 s ticks; ``--tick`` (60 s
by default) keeps the fill within reach of one machine. Up to 60 s the job minutes do
not depend on it (one row per job, device and minute); a longer tick is one flush
window, so one job row per job, device and tick, and the jobs and their totals are the
same. The raw tick table is ``tick`` times smaller than at 1 s ticks.
``--processes`` fills the nodes in that many processes (each its own writers), and
``--maintain`` longer than the agent's 5 minutes makes fewer, larger passes; every node
ends with a pass, so the store ends as the agents' would.

    .venv/bin/python benchmarks/fleet.py [--nodes 1000] [--days 7] [--jobs 50]
        [--tick 60] [--job-hours 24] [--maintain 600] [--processes 1] [--runs 3]
        [--end HH:MM] [--db URL]   # an existing --db is reused, its day sums and
        # open parts' copies made again

Prints figures only; no assertions.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlalchemy import func, select, text  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from benchmarks.dashboard import time_page  # noqa: E402
from joulestat.attribution.accounting import TickResult  # noqa: E402
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo, Share  # noqa: E402
from joulestat.core.tick import Tick, TickEntry  # noqa: E402
from joulestat.store import migrate  # noqa: E402
from joulestat.store.engine import make_engine  # noqa: E402
from joulestat.store.maintenance import ensure_partitions  # noqa: E402
from joulestat.store.open_parts import copy_open_parts  # noqa: E402
from joulestat.store.pool_days import sum_days  # noqa: E402
from joulestat.store.schema import JOB_OPEN_PARTS, NODES  # noqa: E402
from joulestat.store.writer import StoreWriter  # noqa: E402

COMPONENTS = (("cpu", "package-0"), ("dram", "package-0"), ("accelerator", "0"),
              ("net", "eth0"))
NAMES = ("bert-large", "resnet-50", "llama-ft", "whisper", "vit-b")


def _job(node: str, slot: int, generation: int, start_s: float, ended_s: float | None
         ) -> JobRecord:
    name = NAMES[(slot + generation) % len(NAMES)]
    return JobRecord(id=f"{node}-{slot}-{generation}", name=name, kind="training",
                     labels={"team": f"team-{slot % 7}"}, pids=frozenset(),
                     started_s=start_s, ended_s=ended_s)


def fill_node(engine: Engine, index: int, jobs: int, start_s: float, end_s: float,
              tick_s: float, job_s: float, maintain_s: float) -> int:
    """One node's ticks, shares, units and jobs through the writer; returns ticks."""
    node = f"node-{index:04d}"
    writer = StoreWriter(engine, NodeInfo(node, "p4d.24xlarge", "us-east-1", "EPYC", "bench"),
                         [DeviceInfo(c, d, "rapl") for c, d in COMPONENTS],
                         raw_retention_s=7 * 86400, flush_interval_s=10.0,
                         max_buffered_rows=400_000)
    # Slot s runs generation g from start + (s / jobs + g) * job_s, so jobs end and start
    # staggered over the period, always ``jobs`` running.
    running: dict[int, tuple[int, float]] = {}
    ticks = 0
    t = start_s
    next_maintain = start_s + maintain_s
    while t + tick_s <= end_s:
        t0, t1 = t, t + tick_s
        t = t1
        changed: list[JobRecord] = []
        for slot in range(jobs):
            offset = slot / jobs * job_s
            generation = max(0, int((t1 - start_s + offset) // job_s))
            began = start_s - offset + generation * job_s
            current = running.get(slot)
            if current is not None and current[0] != generation:
                changed.append(_job(node, slot, current[0], current[1], t0))
            if current is None or current[0] != generation:
                running[slot] = (generation, max(began, start_s))
                changed.append(_job(node, slot, generation, max(began, start_s), None))
        wobble = (int(t1) * 7919) % 97 / 97.0
        entries = tuple(TickEntry(c, d, "rapl", (200.0 + 20.0 * wobble + i) * tick_s)
                        for i, (c, d) in enumerate(COMPONENTS))
        shares = []
        ids = [f"{node}-{slot}-{gen}" for slot, (gen, _s) in sorted(running.items())]
        for entry in entries:
            each = entry.energy_j * 0.8 / len(ids)
            shares += [Share(job_id, entry.component, entry.device, entry.source,
                             each * 0.7, each * 0.3) for job_id in ids]
            shares.append(Share(None, entry.component, entry.device, entry.source,
                                entry.energy_j - each * len(ids), 0.0))
        units = {job_id: {"sample": 32.0 * tick_s} for job_id in ids}
        tick = Tick(t0, t1, entries)
        writer.record(tick, TickResult(tick, shares, units, changed), None)
        writer.maybe_flush(t1)
        if t1 >= next_maintain:
            writer.maintain(t1)
            next_maintain += maintain_s
        ticks += 1
    writer.flush()
    writer.maintain(end_s + 1)
    writer.close()
    return ticks


def _fill_nodes(url: str, first: int, nodes: int, step: int, jobs: int, start_s: float,
                end_s: float, tick_s: float, job_s: float, maintain_s: float) -> None:
    """Nodes ``first``, ``first + step``, ... below ``nodes``: one process's share."""
    engine = make_engine(url)
    began = time.perf_counter()
    mine = range(first, nodes, step)
    for done, index in enumerate(mine, 1):
        fill_node(engine, index, jobs, start_s, end_s, tick_s, job_s, maintain_s)
        if done % max(1, len(mine) // 10) == 0:
            print(f"  {done} of {len(mine)} nodes filled (process {first + 1} of {step}), "
                  f"{time.perf_counter() - began:.0f} s", flush=True)
    engine.dispose()


def last_end_s(end_utc: str | None) -> float:
    """When the fill's simulated time ends: the last whole minute but one, or the last
    time of day ``end_utc`` (``HH:MM``, UTC) has passed. A comparison reads the current
    UTC day's ended jobs one by one until its node's maintain pass sums them, so the day
    the data ends in, and how far into it, matters: ``--end 23:30`` is the late hour."""
    now_s = float(int(time.time()) // 60 * 60 - 60)
    if end_utc is None:
        return now_s
    try:
        hours, minutes = (int(part) for part in end_utc.split(":"))
    except ValueError:
        raise SystemExit(f"--end {end_utc!r}: expected HH:MM (UTC)") from None
    if not (0 <= hours < 24 and 0 <= minutes < 60):
        raise SystemExit(f"--end {end_utc!r}: expected HH:MM (UTC)")
    end_s = now_s // 86400 * 86400 + hours * 3600 + minutes * 60
    return end_s if end_s <= now_s else end_s - 86400


def fill(url: str, nodes: int, days: float, jobs: int, tick_s: float, job_hours: float,
         maintain_s: float, processes: int = 1, end_utc: str | None = None) -> None:
    engine = make_engine(url)
    migrate.upgrade(engine)
    with engine.connect() as connection:
        existing = connection.execute(text("SELECT count(*) FROM jobs")).scalar_one()
    if existing:
        print(f"reusing the store: {existing:,} jobs already there")
        derive_again(engine)
        engine.dispose()
        return
    end_s = last_end_s(end_utc)
    start_s = end_s - days * 86400
    if engine.dialect.name == "postgresql":
        # The agents would have made each day's partition days before its rows came
        # (agent/store/maintenance.py); made here for the simulated past, else every row
        # would land in the DEFAULT partition.
        with engine.begin() as connection:
            ensure_partitions(connection, start_s, days_ahead=int(days) + 4)
    began = time.perf_counter()
    shares = [(url, first, nodes, processes, jobs, start_s, end_s, tick_s, job_hours * 3600,
               maintain_s) for first in range(processes)]
    if processes == 1:
        _fill_nodes(*shares[0])
    else:
        # Each process its own writers and connections, as a fleet's agents are.
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            pool.starmap(_fill_nodes, shares)
    with engine.connect() as connection:
        counts = {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                  for table in ("jobs", "tick_energy", "minute_energy", "job_energy",
                                "job_minute_energy", "job_units", "job_minute_units",
                                "job_energy_totals")}
        size = connection.execute(text("SELECT pg_database_size(current_database())")
                                  ).scalar_one()
    engine.dispose()
    print(f"filled {nodes} nodes x {days:g} days x {jobs} jobs ({tick_s:g} s ticks) in "
          f"{time.perf_counter() - began:.0f} s, {size / 2**30:.2f} GiB: "
          + ", ".join(f"{t} {n:,}" for t, n in counts.items()))


def derive_again(engine: Engine) -> None:
    """Each node's day sums and open parts' copies as its next maintain pass makes them
    at its totals boundary (which stays where the fill left it): a store filled by an
    older joulestat then reads as this one's would. Prints what those pass steps cost
    a node."""
    with engine.connect() as connection:
        nodes = connection.execute(select(NODES.c.node, NODES.c.totals_until_ms)).all()
    summing = copying = 0.0
    summed = 0
    for node, totals_until_ms in nodes:
        with engine.begin() as connection:
            began = time.perf_counter()
            summed += sum_days(connection, node, totals_until_ms)
            middle = time.perf_counter()
            copy_open_parts(connection, node, totals_until_ms)
            summing += middle - began
            copying += time.perf_counter() - middle
    with engine.connect() as connection:
        copied = connection.execute(select(func.count()).select_from(JOB_OPEN_PARTS)
                                    ).scalar_one()
    each = max(len(nodes), 1) / 1000
    print(f"summed {summed:,} node-days again in {summing:.0f} s ({summing / each:.0f} ms a "
          f"node); copied {copied:,} open parts in {copying:.0f} s "
          f"({copying / each:.1f} ms a node)")


def print_jobs(url: str) -> None:
    """How many jobs the fleet holds, how many still running: what a comparison reads,
    each by the store's one rule (settled totals plus the raw rows after them)."""
    engine = make_engine(url)
    with engine.connect() as connection:
        jobs, running = connection.execute(text(
            "SELECT count(*), count(*) FILTER (WHERE status = 'running') FROM jobs")).one()
    engine.dispose()
    print(f"jobs: {jobs:,}, {running:,} of them running")


COMPARE = ("compare", "--by", "instance_type", "--unit", "sample")


def time_compare(url: str, runs: int) -> list[float]:
    """``joulestat compare`` over every job of the fleet, pooled by instance type, as a
    user runs it (a new process each)."""
    # An installed package has its bytecode (pip compiles it); a sandbox's
    # PYTHONDONTWRITEBYTECODE would make every run compile joulestat's modules again.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "joulestat", *COMPARE, "--db", url],
                       check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - began)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--jobs", type=int, default=50, help="running jobs per node")
    parser.add_argument("--tick", type=float, default=60.0, help="seconds per tick")
    parser.add_argument("--job-hours", type=float, default=24.0)
    parser.add_argument("--maintain", type=float, default=600.0,
                        help="simulated seconds between maintain passes [default: 600]")
    parser.add_argument("--processes", type=int, default=1,
                        help="fill the nodes in this many processes [default: 1]")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--end", metavar="HH:MM",
                        help="end the simulated time at this UTC time of day, the last "
                             "one passed [default: now]")
    parser.add_argument("--db", help="PostgreSQL URL (default: a throwaway server)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from tests.helpers.pg import given_or_throwaway_database

    with given_or_throwaway_database(args.db, "fleet") as url:
        fill(url, args.nodes, args.days, args.jobs, args.tick, args.job_hours, args.maintain,
             args.processes, args.end)
        print_jobs(url)
        os.environ["JOULESTAT_DB"] = url
        logging.disable(logging.WARNING)  # AppTest's "missing ScriptRunContext" chatter
        pages = (("Overview", "pages/overview.py", {}), ("Jobs", "pages/jobs.py", {}),
                 ("Job detail", "pages/job_detail.py", {}),
                 ("Compare", "pages/compare.py", {}))
        time_page(pages[1][1], {}, 1)  # imports and first connection, not counted
        print(f"{'page':<12} {'cold median':>12} {'cold max':>9} {'warm median':>12}  "
              f"(s, {args.runs} runs)")
        for label, page, widgets in pages:
            cold, warm = time_page(page, widgets, args.runs)
            print(f"{label:<12} {statistics.median(cold):>12.3f} {max(cold):>9.3f} "
                  f"{statistics.median(warm):>12.3f}")
        times = time_compare(url, args.runs)
        print(f"joulestat {' '.join(COMPARE)}: median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s (a new process each, imports included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
