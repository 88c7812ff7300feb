"""Per-job energy in the store, for any database: builders of nodes, jobs, ticks and
their shares.

The scenarios are tests/store/test_jobs.py and the other store tests, each run on SQLite
and on PostgreSQL. Expected values are computed from
:func:`joulestat.attribution.shares.attribute`'s own shares, never from the store.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.attribution.shares import DeviceUse, TickUsage, attribute
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo, Share
from joulestat.core.tick import Tick, TickEntry
from joulestat.store import migrate
from joulestat.store.jobs import JobSummary, list_jobs
from joulestat.store.nodes import unattributed_check
from joulestat.store.writer import StoreWriter

LOADER = NodeInfo("loader-1", "c5.4xlarge", "eu-west-1", "Xeon", "0.1.0")
TRAINER = NodeInfo("trainer-1", "p4d.24xlarge", "eu-west-1", "EPYC", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl", index=0),
           DeviceInfo("accelerator", "0", "nvml_energy", model="A100", uuid="GPU-1", index=0)]
IDLE_W = {("cpu", "0"): 4.0, ("accelerator", "0"): 60.0}
T0 = 1_700_000_040.0  # a minute boundary
RETENTION_S = 600.0

Totals = dict[tuple[str, str], list[float]]  # (job, component) -> [dynamic, idle]


def make_tick(t1_s: float, cpu_j: float, gpu_j: float | None,
              cpu_source: str = "rapl") -> Tick:
    entries = [TickEntry("cpu", "0", cpu_source, cpu_j)]
    if gpu_j is not None:
        entries.append(TickEntry("accelerator", "0", "nvml_energy", gpu_j))
    return Tick(t1_s - 1.0, t1_s, tuple(entries))


def shares_for(tick: Tick, jobs: tuple[str, ...], i: int, policy: str = "share") -> list[Share]:
    """A realistic, uneven split: CPU time varies per tick, the GPU is shared 7:1."""
    job_cpu = {job: 0.2 + 0.1 * ((i + n) % 4) for n, job in enumerate(jobs)}
    utilization = {job: 70.0 if n == 0 else 10.0 for n, job in enumerate(jobs)}
    usage = TickUsage(
        node_busy_cpu_s=2.0, job_cpu_s=job_cpu,
        devices={("accelerator", "0"): DeviceUse(utilization, jobs)}, running_jobs=jobs,
    )
    return attribute(tick, usage, IDLE_W, policy)


def feed(writer: StoreWriter, start_s: float, count: int, jobs: tuple[str, ...],
         gpu: bool = True, policy: str = "share", units: dict[str, float] | None = None,
         totals: Totals | None = None) -> Totals:
    """``count`` 1 s ticks with their shares (and units per job); returns job totals."""
    totals = defaultdict(lambda: [0.0, 0.0]) if totals is None else totals
    for i in range(count):
        t = make_tick(start_s + i + 1, 20.0 + i % 7, 150.0 + i % 11 if gpu else None)
        shares = shares_for(t, jobs, i, policy)
        writer.add(t)
        writer.add_shares(t, shares)
        for share in shares:
            if share.job is not None:
                total = totals[(share.job, share.component)]
                total[0] += share.dynamic_j
                total[1] += share.idle_j
        for job in jobs:
            if units:
                writer.add_units(job, t.t1_s, units)
    return totals


def job_total(totals: Totals, job: str) -> float:
    return sum(d + i for (j, _c), (d, i) in totals.items() if j == job)


def make_job(job_id: str, started_s: float, labels: dict[str, str] | None = None,
             pids: set[int] | None = None, ended_s: float | None = None) -> JobRecord:
    return JobRecord(id=job_id, name=f"name-{job_id}", kind="training",
                     labels=dict(labels or {}), pids=frozenset(pids or {100}),
                     started_s=started_s, origin="api", ended_s=ended_s)


def count(engine: Engine, table: str) -> int:
    with engine.connect() as connection:
        return connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()


def summary(engine: Engine, job_id: str) -> JobSummary:
    [found] = [s for s in list_jobs(engine) if s.id == job_id]
    return found


def writer_for(engine: Engine, node: NodeInfo = TRAINER, **kwargs) -> StoreWriter:
    kwargs.setdefault("raw_retention_s", RETENTION_S)
    return StoreWriter(engine, node, DEVICES, **kwargs)


def assert_conserved(engine: Engine, node: str, expected_rows: int | None = None) -> None:
    rows = unattributed_check(engine, node)
    assert rows, "nothing to check"
    if expected_rows is not None:
        assert len(rows) == expected_rows
    for t_end_ms, component, device, node_j, sum_j in rows:
        assert sum_j == pytest.approx(node_j, rel=1e-9, abs=1e-9), (t_end_ms, component, device)


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the store at ``engine`` down to ``revision`` (``"base"``: no schema), and
    check it got there."""
    from alembic import command

    config = migrate.alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
    assert migrate.current_revision(engine) == (None if revision == "base" else revision)
