"""Per-job energy in the store, for any database: builders of nodes, jobs, ticks and
their shares, and the writers of older revisions the migration scenarios reproduce.

The scenarios are tests/store/test_jobs.py and test_migrations.py, each run on SQLite and
on PostgreSQL. Expected values are computed from
:func:`joulestat.attribution.shares.attribute`'s own shares, never from the store.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Column, Double, MetaData, String, Table, text
from sqlalchemy.engine import Connection, Engine

from joulestat.attribution.registry import Job
from joulestat.attribution.shares import DeviceUse, Share, TickUsage, attribute
from joulestat.core.tick import Tick, TickEntry
from joulestat.devices.sensor import DeviceInfo
from joulestat.host.identity import NodeInfo
from joulestat.store import maintenance, migrate
from joulestat.store import rows as store_rows
from joulestat.store.jobs import (
    JobSummary,
    by_component,
    by_unit,
    list_jobs,
    part_energy,
    part_units,
)
from joulestat.store.maintenance import SETTLE_MS
from joulestat.store.nodes import unattributed_check
from joulestat.store.rows import PendingJobs
from joulestat.store.schema import JOB_MINUTE_ENERGY
from joulestat.store.writer import StoreWriter

LOADER = NodeInfo("loader-1", "c5.4xlarge", "eu-west-1", "Xeon", "0.1.0")
TRAINER = NodeInfo("trainer-1", "p4d.24xlarge", "eu-west-1", "EPYC", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl", index=0),
           DeviceInfo("accelerator", "0", "nvml_energy", model="A100", uuid="GPU-1", index=0)]
IDLE_W = {("cpu", "0"): 4.0, ("accelerator", "0"): 60.0}
T0 = 1_700_000_040.0  # a minute boundary
RETENTION_S = 600.0

Totals = dict[tuple[str, str], list[float]]  # (job, component) -> [dynamic, idle]


def written_before_0014(check: Callable[..., None]) -> Callable[..., None]:
    """``check`` runs today's writer on stores before migrations 0012 and 0014. Before
    0012 there is no ``job_nodes.pooled_day_s`` and no day sums: as the writer before it,
    its maintain passes fold nothing and its job writes take nothing apart
    (agent/store/job_days.py). Before 0014 there is no ``job_minute_units``: its passes
    merge each minute's unit rows in ``job_units``, as before. After its upgrade to the
    head the jobs are read one by one, as unfolded ones are, and merged unit rows left in
    ``job_units`` read as any unit row."""

    @functools.wraps(check)
    def as_before(*args: Any, **kwargs: Any) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(maintenance, "fold_settled", lambda *_args: 0)
            patch.setattr(maintenance, "fold_running", lambda *_args: 0)
            patch.setattr(maintenance, "roll_up_units", compact_units_as_before_0014)
            patch.setattr(store_rows, "unpool", lambda *_args: 0)
            check(*args, **kwargs)

    return as_before


def compact_units_as_before_0014(connection: Connection, node: str, after_ms: int | None,
                                 bound_ms: int) -> None:
    """A maintain pass's unit rows as the code before migration 0014 left them: each
    minute's rows in (after_ms, bound_ms] merged into one ``job_units`` row at the
    minute's end."""
    window = {"node": node, "after": -1 if after_ms is None else after_ms, "bound": bound_ms}
    where = "WHERE node = :node AND t_end_ms > :after AND t_end_ms <= :bound"
    merged = [row._asdict() for row in connection.execute(text(
        "SELECT job_id, node, ((t_end_ms - 1) / 60000 + 1) * 60000 AS t_end_ms, unit, "
        f"sum(count) AS count FROM job_units {where} "
        "GROUP BY job_id, node, ((t_end_ms - 1) / 60000 + 1) * 60000, unit"), window)]
    connection.execute(text(f"DELETE FROM job_units {where}"), window)
    if merged:
        connection.execute(text("INSERT INTO job_units (job_id, node, t_end_ms, unit, count) "
                                "VALUES (:job_id, :node, :t_end_ms, :unit, :count)"), merged)


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
             pids: set[int] | None = None, ended_s: float | None = None) -> Job:
    return Job(id=job_id, name=f"name-{job_id}", kind="training", labels=dict(labels or {}),
               pids=set(pids or {100}), started_s=started_s, origin="api", ended_s=ended_s)


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


# -- scenarios shared with the PostgreSQL tests -------------------------------------------


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the store at ``engine`` down to ``revision``, and check it got there."""
    from alembic import command

    config = migrate.alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
    assert migrate.current_revision(engine) == revision


def save_jobs_before_0007(engine: Engine, jobs: list[Job], node: NodeInfo = TRAINER) -> None:
    """``jobs`` saved as the writer before store revision 0007 saved them: without
    ``agent_labels`` and ``latency``, the columns 0007 and 0008 add, so a test can fill a
    store at an older revision (today's writer writes them and needs the head). A job or
    node part already stored is left as it is."""
    pending = PendingJobs()
    for job in jobs:
        pending.save_job(job, node)
    with engine.begin() as connection:
        for job_row, node_row in pending.jobs.values():
            for table, row in (("jobs", job_row), ("job_nodes", node_row)):
                row = {k: v for k, v in row.items() if k not in ("agent_labels", "latency")}
                connection.execute(text(
                    f"INSERT INTO {table} ({', '.join(row)}) "
                    f"VALUES ({', '.join(':' + k for k in row)}) ON CONFLICT DO NOTHING"), row)


def part_figures(engine: Engine) -> dict[str, tuple[dict[str, float], dict[str, float],
                                                    dict[str, float]]]:
    """Per job (dynamic, idle) joules per component and unit counts, over all its nodes,
    through the store's per-part reads: what ``list_jobs`` sums, without the columns of
    ``jobs``, so it reads a store at any revision since 0003."""
    with engine.connect() as connection:
        energy = part_energy(connection, None, None)
        units = part_units(connection, None, None)
    return {job: (*by_component(energy, job), by_unit(units, job)) for job in sorted(energy)}


def _figures(engine: Engine) -> dict[str, tuple[dict[str, float], dict[str, float],
                                                dict[str, float]]]:
    return {s.id: (s.dynamic_j, s.idle_j, s.units) for s in list_jobs(engine)}


def _assert_same_figures(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    for job, (dynamic, idle, units) in expected.items():
        assert found[job][0] == pytest.approx(dynamic, rel=1e-12), job
        assert found[job][1] == pytest.approx(idle, rel=1e-12), job
        assert found[job][2] == pytest.approx(units, rel=1e-12), job


# job_energy_totals as migrations 0003 to 0009 made it: no source in its key.
TOTALS_BEFORE_0010 = Table(
    "job_energy_totals", MetaData(),
    *(Column(name, String, primary_key=True) for name in ("job_id", "node", "component")),
    Column("dynamic_j", Double), Column("idle_j", Double),
)



@contextlib.contextmanager
def totals_before_0010() -> Iterator[None]:
    """Today's writer on a store before migration 0010: its maintain passes sum the job
    totals by the key that store has (job, node, component), as the writer did then."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(maintenance, "JOB_ENERGY_TOTALS", TOTALS_BEFORE_0010)
        yield


def _roll_up_jobs_as_before_0011(connection: Connection, insert: Any, node: str,
                                 until_ms: int) -> None:
    """Job minutes rolled up as the code before migration 0011 could: every minute up to
    ``until_ms`` again on each pass, replacing its row through the table's unique key
    (which every store before 0011 has)."""
    query = text(
        "SELECT job_id, node, ((t_end_ms - 1) / 60000) * 60 AS minute_start_s, component, "
        "device, sum(dynamic_j) AS dynamic_j, sum(idle_j) AS idle_j FROM job_energy "
        "WHERE node = :node AND t_end_ms <= :until "
        "GROUP BY job_id, node, ((t_end_ms - 1) / 60000) * 60, component, device")
    rows = [row._asdict() for row in connection.execute(query, {"node": node, "until": until_ms})]
    if not rows:
        return
    statement = insert(JOB_MINUTE_ENERGY)
    connection.execute(statement.on_conflict_do_update(
        index_elements=["job_id", "node", "minute_start_s", "component", "device"],
        set_={name: statement.excluded[name] for name in ("dynamic_j", "idle_j")}), rows)


def _maintain_as_before_0009(engine: Engine, node: str, now_s: float) -> tuple[int, int]:
    """A maintain pass as the code before migration 0009 made it: job minutes rolled up
    as they completed, the job totals summed up to the last complete minute less
    SETTLE_MS with the raw job rows kept, and raw rows (ticks and job rows alike)
    pruned by the retention. Returns (prune boundary, totals boundary)."""
    from joulestat.store.engine import dialect_insert
    from joulestat.store.maintenance import roll_up_ticks

    complete_ms = round(now_s * 1000) // 60_000 * 60_000
    totals_ms = complete_ms - SETTLE_MS
    pruned_ms = (round(now_s * 1000) - round(RETENTION_S * 1000)) // 60_000 * 60_000
    insert = dialect_insert(engine)
    with engine.begin() as connection:
        roll_up_ticks(connection, insert, node, None, complete_ms)
        _roll_up_jobs_as_before_0011(connection, insert, node, complete_ms)
        window = {"node": node, "until": totals_ms, "pruned": pruned_ms}
        connection.execute(text(
            "INSERT INTO job_energy_totals (job_id, node, component, dynamic_j, idle_j) "
            "SELECT job_id, node, component, sum(dynamic_j), sum(idle_j) FROM job_energy "
            "WHERE node = :node AND t_end_ms <= :until GROUP BY job_id, node, component"),
            window)
        connection.execute(text(
            "INSERT INTO job_unit_totals (job_id, node, unit, count) "
            "SELECT job_id, node, unit, sum(count) FROM job_units "
            "WHERE node = :node AND t_end_ms <= :until GROUP BY job_id, node, unit"), window)
        compact_units_as_before_0014(connection, node, None, pruned_ms)
        for table in ("tick_energy", "job_energy"):
            connection.execute(text(
                f"DELETE FROM {table} WHERE node = :node AND t_end_ms <= :pruned"), window)
        connection.execute(text(
            "UPDATE nodes SET totals_until_ms = :until, raw_pruned_until_ms = :pruned "
            "WHERE node = :node"), window)
    return pruned_ms, totals_ms


def _by_component(series: list[tuple[float, str, float, float]]) -> dict[str, float]:
    summed: defaultdict[str, float] = defaultdict(float)
    for _t, component, dynamic_j, idle_j in series:
        summed[component] += dynamic_j + idle_j
    return dict(summed)
