"""How fast the store grows: bytes per node-hour at 0, 10 and 50 running jobs.

One simulated node (or ``--nodes`` of them, interleaved tick by tick in one store, as a
fleet writes into one PostgreSQL) ticks every second (simulated time, as fast as the
writer takes it) through the agent's own ``StoreWriter``: 4 components (``cpu``, ``dram``,
``accelerator``, ``net``), a share row per job and component plus the unattributed
remainder, one unit count per job and tick. The writer is driven as the agent drives
it: ``maybe_flush`` after every tick (so a flush goes out every ``flush_interval``
seconds, 10 by default, or sooner when a full batch waits) and ``maintain`` once a
simulated minute (rollups into minutes and job totals; the 7-day raw retention prunes
nothing within the run; on PostgreSQL a plain ``VACUUM`` follows each, as autovacuum
would within a minute of real time). The store's size is taken after the schema is made and again
at the end, with SQLite's WAL checkpointed and PostgreSQL's buffers checkpointed; the
difference over the simulated hours is the growth per node-hour (during the raw
retention, i.e. raw rows and their rollups both held; what stays constant, such as the
last minutes of raw job windows, weighs less the longer the run). A breakdown by table
follows, and the growth after a 10-minute warm-up (the rate a store keeps growing at).
The store is at the head revision. (``--revisions``, which measured a store left at an
older layout beside today's, went with the revisions before the baseline migration: to
weigh a change of layout, run this on the commits before and after it.)

    .venv/bin/python benchmarks/store_growth.py [--minutes 60] [--jobs 0 10 50]
        [--backends sqlite postgresql] [--nodes 1 4] [--start 2026-12-07T12:00Z]

The simulated run starts now unless ``--start`` says when: an hour that crosses midnight
UTC grows more on PostgreSQL (its raw rows move to the next day's partition, and the
space the prune frees in the day before is reused only when that partition is dropped),
so figures meant to be compared are best taken from the same start.

PostgreSQL is a throwaway server (tests/helpers/pg.py). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from joulestat.attribution.accounting import TickResult  # noqa: E402
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo, Share
from joulestat.core.tick import Tick, TickEntry  # noqa: E402
from joulestat.store import migrate  # noqa: E402
from joulestat.store.engine import make_engine  # noqa: E402
from joulestat.store.schema import CORE_TABLES  # noqa: E402
from joulestat.store.writer import StoreWriter  # noqa: E402

COMPONENTS = (("cpu", "package-0"), ("dram", "package-0"), ("accelerator", "0"),
              ("net", "eth0"))
MIB = 1024 * 1024
# Growth is also measured from here on: what stays constant once the node runs (the last
# minutes of raw job windows, a day partition's first pages) is then left out.
WARM_UP_S = 600


def synthetic_tick(t1_s: float, jobs: int, node: str = "node") -> tuple[Tick, TickResult]:
    """One second of a busy node: energies that vary from tick to tick, split among
    ``jobs`` jobs with the rest unattributed (jobs + unattributed = node, exactly)."""
    wobble = (int(t1_s) * 7919) % 97 / 97.0
    entries = tuple(TickEntry(c, d, "rapl", 20.0 + 10.0 * wobble + i)
                    for i, (c, d) in enumerate(COMPONENTS))
    shares = []
    for entry in entries:
        each = entry.energy_j * 0.8 / jobs if jobs else 0.0
        for j in range(jobs):
            shares.append(Share(f"{node}-job-{j}", entry.component, entry.device,
                                entry.source, each * 0.7, each * 0.3))
        shares.append(Share(None, entry.component, entry.device, entry.source,
                            entry.energy_j - each * jobs, 0.0))
    units = {f"{node}-job-{j}": {"sample": 32.0} for j in range(jobs)}
    tick = Tick(t1_s - 1.0, t1_s, entries)
    return tick, TickResult(tick, shares, units, [])


def vacuum(engine: Engine) -> None:
    """PostgreSQL's autovacuum, which the simulated clock outruns: with its default
    naptime of a minute it vacuums a table whose dead rows passed 20 % of it within
    about a minute of real time, so the space of deleted rows is reused."""
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM")


def drive(engine: Engine, node: str | list[str], jobs: int, start_s: float, seconds: int,
          flush_interval_s: float = 10.0, at_s: int = 0,
          then: Callable[[], None] | None = None) -> StoreWriter:
    """``seconds`` ticks of a node (or of several, interleaved tick by tick as a fleet's
    agents write into one store) through the writer as the agent drives it; ``then()``
    after the maintain passes of simulated second ``at_s``. Returns the first node's
    writer."""
    nodes = [node] if isinstance(node, str) else node
    writers = []
    for name in nodes:
        writer = StoreWriter(engine, NodeInfo(name, "c6i.xlarge", "us-east-1", "Xeon", "bench"),
                             [DeviceInfo(c, d, "rapl") for c, d in COMPONENTS],
                             raw_retention_s=7 * 86400, flush_interval_s=flush_interval_s)
        for j in range(jobs):
            writer.save_job(JobRecord(id=f"{name}-job-{j}", name=f"train-{j}",
                                      kind="training", labels={}, pids=frozenset(),
                                      started_s=start_s))
        writers.append((name, writer))
    for second in range(1, seconds + 1):
        now_s = start_s + second
        for name, writer in writers:
            tick, result = synthetic_tick(now_s, jobs, name)
            writer.record(tick, result, None)
            writer.maybe_flush(now_s)
            if second % 60 == 0:
                writer.maintain(now_s)
        if second % 60 == 0:
            if engine.dialect.name == "postgresql":
                vacuum(engine)
            if second == at_s and then is not None:
                then()
    for _name, writer in writers:
        writer.maintain(start_s + seconds + 1)
    return writers[0][1]


def sqlite_size(engine: Engine, path: Path) -> tuple[int, dict[str, int]]:
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        try:
            tables = dict(connection.exec_driver_sql(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name").all())
        except Exception:  # noqa: BLE001 - dbstat is a compile-time option
            tables = {}
    size = path.stat().st_size
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        size += wal.stat().st_size
    return size, tables


def postgres_size(engine: Engine) -> tuple[int, dict[str, int]]:
    with engine.connect() as connection:
        connection.exec_driver_sql("CHECKPOINT")
        size = connection.execute(text("SELECT pg_database_size(current_database())")).scalar()
        tables = {}
        for table in CORE_TABLES:
            # A partitioned table's size is its partitions'; a plain one has no tree.
            tables[table.name] = connection.execute(text(
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree(CAST(:name AS regclass)) WHERE isleaf), "
                "pg_total_relation_size(CAST(:name AS regclass)))"), {"name": table.name}
            ).scalar()
    return int(size), {name: int(value) for name, value in tables.items()}


def _utc_start(text: str) -> float:
    """``--start``: an ISO 8601 time (UTC where it names no offset) as Unix seconds."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-07T12:00Z)") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def measure(backend: str, url: str, size: Callable[[Engine], tuple[int, dict[str, int]]],
            jobs: int, seconds: int, nodes: int = 1, start_s: float | None = None) -> None:
    engine = make_engine(url)
    revision = migrate.upgrade(engine)
    start_s = float(int(time.time() if start_s is None else start_s) // 60 * 60)
    before, before_tables = size(engine)
    warm: list[tuple[int, dict[str, int]]] = []
    began = time.perf_counter()
    writer = drive(engine, [f"node-{n}" for n in range(nodes)], jobs, start_s, seconds,
                   at_s=WARM_UP_S, then=lambda: warm.append(size(engine)))
    took = time.perf_counter() - began
    after, after_tables = size(engine)
    hours = seconds / 3600 * nodes  # node-hours
    per_hour = (after - before) / hours
    steady = ""
    if warm:
        steady_per_hour = (after - warm[0][0]) / ((seconds - WARM_UP_S) / 3600 * nodes)
        steady = f"; {steady_per_hour / MIB:.2f} MiB after the first {WARM_UP_S // 60} min"
    layout = f"{nodes} node{'s' if nodes > 1 else ''}, store at {revision}"
    print(f"{backend:<10} {jobs:>3} jobs ({layout}): {per_hour / MIB:6.2f} MiB per node-hour "
          f"({(after - before) / MIB:.2f} MiB over {seconds} simulated s{steady}; "
          f"{writer.written_rows} rows written by each node, {writer.flushes} flushes, "
          f"{took:.1f} s to write)")
    grown = {name: (after_tables.get(name, 0) - before_tables.get(name, 0)) / hours
             for name in after_tables}
    parts = [f"{name} {value / MIB:.2f}" for name, value in
             sorted(grown.items(), key=lambda item: -item[1]) if value > 0.005 * MIB]
    if parts:
        print(f"           MiB per node-hour by table: {', '.join(parts)}")
    if warm:
        steady_hours = (seconds - WARM_UP_S) / 3600 * nodes
        grown = {name: (after_tables.get(name, 0) - warm[0][1].get(name, 0)) / steady_hours
                 for name in after_tables}
        parts = [f"{name} {value / MIB:.2f}" for name, value in
                 sorted(grown.items(), key=lambda item: -item[1]) if value > 0.005 * MIB]
        print(f"           after the first {WARM_UP_S // 60} min, by table: {', '.join(parts)}")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0,
                        help="simulated minutes per run [default: 60]")
    parser.add_argument("--jobs", type=int, nargs="+", default=[0, 10, 50])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"],
                        choices=["sqlite", "postgresql"])
    parser.add_argument("--start", type=_utc_start, default=None, metavar="ISO_TIME",
                        help="when the simulated run starts, e.g. 2026-12-07T12:00Z "
                             "[default: now]; a run across midnight UTC puts PostgreSQL's "
                             "raw rows in two day partitions (see docs/store.md)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1],
                        help="nodes writing into one store, interleaved tick by tick; "
                             "several show a fleet's PostgreSQL, where each node's rows "
                             "land in the middle of shared indexes [default: 1]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    seconds = int(args.minutes * 60)
    print(f"store growth: 1 s ticks, {len(COMPONENTS)} components, one unit count "
          f"per job and tick, {seconds} simulated s per run (PostgreSQL: VACUUM once a "
          "simulated minute)")
    runs = [(jobs, nodes) for nodes in args.nodes for jobs in args.jobs]
    if "sqlite" in args.backends:
        with tempfile.TemporaryDirectory() as tmp:
            for jobs, nodes in runs:
                path = Path(tmp) / f"growth-{jobs}-{nodes}.db"
                measure("sqlite", f"sqlite:///{path}",
                        lambda engine, path=path: sqlite_size(engine, path), jobs, seconds,
                        nodes, args.start)
    if "postgresql" in args.backends:
        from tests.helpers.pg import running_postgres

        with running_postgres() as server:
            for jobs, nodes in runs:
                url = server.create_database(f"growth_{jobs}_{nodes}")
                measure("postgresql", url, postgres_size, jobs, seconds, nodes, args.start)


if __name__ == "__main__":
    main()
