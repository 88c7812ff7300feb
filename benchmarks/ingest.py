"""One PostgreSQL for a fleet: how many node-ticks a second the real writer sustains.

Simulated agents write through the agent's own ``StoreWriter`` (the same buffer, batch
inserts and upserts) into one throwaway PostgreSQL server (see tests/helpers/pg.py): each node
ticks once a second with 4 components and ``--jobs`` running jobs (5 by default; a
share per job and component, the unattributed remainder, one unit count per job; the
jobs themselves saved at the node's first tick with ``--save-jobs``), and flushes
every ``--flush`` seconds, staggered (the writer stores a job's shares as one row per
flush window: docs/store.md). Printed: node-ticks per second offered and written,
flush latency percentiles, the database server's CPU over the run, and the time the
dashboard's Jobs list read takes meanwhile (the read behind the Jobs page).

    .venv/bin/python benchmarks/ingest.py [--nodes 1000] [--seconds 60] [--flush 10]
        [--jobs 5] [--processes 1] [--save-jobs] [--db URL]

The issue's target: 1,000 node-ticks/s for 5 minutes (``--seconds 300``) on this
2-vCPU machine with the Jobs read under 1 s. The simulated agents share the machine
with the server, so the figure is a floor for a server of its own. Prints only.
"""

from __future__ import annotations

import argparse
import functools
import logging
import multiprocessing
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from joulestat.attribution.accounting import TickResult  # noqa: E402
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo, Share
from joulestat.core.tick import Tick, TickEntry  # noqa: E402
from joulestat.store import migrate
from joulestat.store.engine import make_engine  # noqa: E402
from joulestat.store.writer import StoreWriter  # noqa: E402

COMPONENTS = (("cpu", "package-0"), ("dram", "package-0"), ("accelerator", "0"), ("net", "eth0"))
JOBS = 5
NAMES = ("bert-large", "resnet-50", "llama-ft", "whisper", "vit-b")


@functools.cache
def _node_parts(node_index: int, jobs: int = JOBS
                ) -> tuple[tuple[TickEntry, ...], list[Share], dict[str, dict[str, float]]]:
    """A node's entries, shares and units, the same every second: made once, so the
    simulated agents' own attribution (each real agent's work on its own machine) does
    not crowd the database and the writers out of this shared 2-vCPU machine."""
    entries = tuple(TickEntry(c, d, "rapl", 10.0 + node_index % 7) for c, d in COMPONENTS)
    shares = []
    for entry in entries:
        for j in range(jobs):
            shares.append(Share(f"job-{node_index}-{j}", entry.component, entry.device,
                                entry.source, entry.energy_j * 0.75 / jobs, 0.0))
        shares.append(Share(None, entry.component, entry.device, entry.source,
                            entry.energy_j * 0.25, 0.0))
    units = {f"job-{node_index}-{j}": {"sample": 32.0} for j in range(jobs)}
    return entries, shares, units


def node_tick(t1_s: float, node_index: int, jobs: int = JOBS, register: bool = False
              ) -> tuple[Tick, TickResult]:
    """A node's tick; with ``register`` (its first) it saves the node's jobs, as an
    agent saves a job it starts measuring, so the store holds a fleet running them (to
    compare over, with ``--db``)."""
    entries, shares, units = _node_parts(node_index, jobs)
    tick = Tick(t1_s - 1.0, t1_s, entries)
    started = [JobRecord(id=f"job-{node_index}-{j}", name=NAMES[j % len(NAMES)],
                         kind="training", labels={}, pids=frozenset({1000 + j}),
                         started_s=t1_s - 1.0, origin="api")
               for j in range(jobs)] if register else []
    return tick, TickResult(tick, shares, units, started)


@dataclass
class Part:
    """What one process of simulated agents did (see :func:`simulate`)."""

    offered: int = 0
    backlog: float = 0.0
    lost: int = 0
    stored_rows: int = 0
    drain_s: float = 0.0
    elapsed_s: float = 0.0  # from the start to the last tick offered
    latencies: list[float] = field(default_factory=list)
    jobs_read_s: list[float] = field(default_factory=list)


def simulate(url: str, first: int, nodes: int, started: float, seconds: float,
             flush_s: float, flushers: int, jobs: int, jobs_read=None,
             save_jobs: bool = False) -> Part:
    """Nodes ``first .. first + nodes - 1`` ticking each second of the wall clock from
    the monotonic instant ``started`` for ``seconds``, flushed by ``flushers`` threads;
    ``jobs_read()`` every 10 s when given."""
    groups = flushers  # real agents flush independently; threads stand in for them
    engines = [make_engine(url) for _ in range(groups)]  # a connection pool per thread
    writers = [StoreWriter(engines[i % groups], NodeInfo(f"sim-{first + i:04d}", "c6i.xlarge",
                                                         "us-east-1", "Xeon", "bench"),
                           [DeviceInfo(c, d, "rapl") for c, d in COMPONENTS],
                           raw_retention_s=7 * 86400, flush_interval_s=flush_s)
               for i in range(nodes)]
    part = Part()
    stop = threading.Event()

    def flusher(group: list[StoreWriter], offset_s: float) -> None:
        next_s = time.monotonic() + offset_s
        while not stop.wait(max(0.0, next_s - time.monotonic())):
            for writer in group:
                began = time.perf_counter()
                if writer.flush():
                    part.latencies.append(time.perf_counter() - began)
            next_s += flush_s

    threads = [threading.Thread(target=flusher, args=(writers[g::groups], flush_s * g / groups),
                                daemon=True) for g in range(groups)]
    for thread in threads:
        thread.start()
    second = 0
    while time.monotonic() - started < seconds:
        now = time.time()
        for i, writer in enumerate(writers):
            tick, result = node_tick(now, first + i, jobs,
                                     register=save_jobs and second == 0)
            writer.record(tick, result, None)
        part.offered += nodes
        second += 1
        if jobs_read is not None and second % 10 == 5:
            began = time.perf_counter()
            jobs_read()
            part.jobs_read_s.append(time.perf_counter() - began)
        time.sleep(max(0.0, started + second - time.monotonic()))
    part.elapsed_s = time.monotonic() - started
    stop.set()
    for thread in threads:
        thread.join()
    # Rows a node-tick puts in the buffer (the store gets fewer: one job row per flush
    # window), so what was written is what was offered less what still waits.
    rows_per_tick = len(COMPONENTS) * (jobs + 2) + jobs
    part.backlog = sum(w.buffered_rows for w in writers) / rows_per_tick
    part.lost = sum(w.dropped_rows + w.folded_rows for w in writers)
    part.stored_rows = sum(w.written_rows for w in writers)
    drain_began = time.monotonic()
    for writer in writers:
        writer.flush()
    part.drain_s = time.monotonic() - drain_began
    return part


def _simulate_in_child(args: tuple[Any, ...]) -> Part:
    return simulate(*args)


def run(url: str, nodes: int, seconds: float, flush_s: float, jobs_read,
        flushers: int = 16, jobs: int = JOBS, processes: int = 1, save_jobs: bool = False
        ) -> None:
    """Simulated agents in ``processes`` processes (one Python interpreter cannot record
    and flush 1,000 busy nodes' rows a second: their work is the agents', each on its
    own machine in a fleet), the Jobs read in this one."""
    server = _postgres_processes()
    cpu_before = sum(p.cpu_times().user + p.cpu_times().system for p in server)
    started = time.monotonic() + 10.0  # the writers register first (a few seconds)
    share = -(-nodes // processes)
    spans = [(i * share, min(share, nodes - i * share)) for i in range(processes)]
    if processes == 1:
        parts = [simulate(url, 0, nodes, started, seconds, flush_s, flushers, jobs, jobs_read,
                          save_jobs)]
        cpu_after = sum(p.cpu_times().user + p.cpu_times().system
                        for p in _postgres_processes())
    else:
        context = multiprocessing.get_context("fork")
        with context.Pool(processes) as pool:
            pending = pool.map_async(_simulate_in_child, [
                (url, first, count, started, seconds, flush_s, max(1, flushers // processes),
                 jobs, None, save_jobs) for first, count in spans])
            jobs_read_s = []
            time.sleep(max(0.0, started - time.monotonic()))
            while time.monotonic() - started < seconds:
                time.sleep(10.0)
                began = time.perf_counter()
                jobs_read()
                jobs_read_s.append(time.perf_counter() - began)
            cpu_after = sum(p.cpu_times().user + p.cpu_times().system
                            for p in _postgres_processes())
            parts = pending.get()
        parts[0].jobs_read_s = jobs_read_s
    elapsed = max(p.elapsed_s for p in parts)
    offered = sum(p.offered for p in parts)
    backlog = sum(p.backlog for p in parts)
    written_ticks = offered - backlog
    stored_rows = sum(p.stored_rows for p in parts)
    lost = sum(p.lost for p in parts)
    drain_s = max(p.drain_s for p in parts)
    latencies = [s for p in parts for s in p.latencies]
    jobs_read_s = [s for p in parts for s in p.jobs_read_s]
    lat = sorted(latencies) or [0.0]
    pct = {p: lat[min(len(lat) - 1, int(len(lat) * p / 100))] for p in (50, 90, 99)}
    print(f"{nodes} nodes at 1 Hz, {jobs} jobs each ({processes} process(es) of simulated "
          f"agents), for {elapsed:.0f} s: offered {offered / elapsed:.0f} "
          f"node-ticks/s, written within the run {written_ticks / elapsed:.0f} node-ticks/s; "
          f"{backlog:.0f} node-ticks still buffered at the end, written in {drain_s:.1f} s; "
          f"{stored_rows / elapsed:.0f} store rows/s, {lost} rows dropped or folded")
    print(f"  flush latency per node batch: p50 {pct[50] * 1000:.0f} ms, p90 "
          f"{pct[90] * 1000:.0f} ms, p99 {pct[99] * 1000:.0f} ms ({len(latencies)} flushes)")
    print(f"  PostgreSQL CPU: {(cpu_after - cpu_before) / elapsed:.0%} of a core")
    if jobs_read_s:
        print(f"  Jobs list read meanwhile: median {statistics.median(jobs_read_s):.2f} s, "
              f"max {max(jobs_read_s):.2f} s ({len(jobs_read_s)} reads)")


def _postgres_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name"]):
        if (proc.info["name"] or "").startswith("postgres"):
            found.append(proc)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--flush", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=JOBS,
                        help=f"running jobs per node [default: {JOBS}]")
    parser.add_argument("--flushers", type=int, default=16,
                        help="threads flushing the simulated writers [default: 16]")
    parser.add_argument("--processes", type=int, default=1,
                        help="processes the simulated agents are split over [default: 1]")
    parser.add_argument("--save-jobs", action="store_true",
                        help="save each node's jobs at its first tick, as agents do, so the "
                        "store (--db) holds a fleet running them [default: shares only, "
                        "no job rows]")
    parser.add_argument("--db", help="an empty PostgreSQL database to write into and keep "
                        "(e.g. to compare over afterwards) [default: a throwaway server]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from tests.helpers.pg import given_or_throwaway_database

    with given_or_throwaway_database(args.db, "ingest") as url:
        migrate.upgrade(make_engine(url))
        from joulestat.store.jobs import list_jobs

        reader = make_engine(url)
        run(url, args.nodes, args.seconds, args.flush, lambda: list_jobs(reader),
            args.flushers, args.jobs, args.processes, args.save_jobs)


if __name__ == "__main__":
    main()
