"""Per-job energy in the store, for any database: builders, and the ``check_*`` scenarios.

Each scenario takes an engine; they run on SQLite in tests/unit/test_store_jobs.py and on
a real PostgreSQL in tests/integration/test_store_postgres.py. Expected values are
computed from :func:`joulestat.attribution.shares.attribute`'s own shares, never from the store.
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

from joulestat.attribution.registry import Job, JobRegistry
from joulestat.attribution.shares import DeviceUse, Share, TickUsage, attribute
from joulestat.core.tick import Tick, TickEntry
from joulestat.devices.sensor import DeviceInfo
from joulestat.host.identity import NodeInfo
from joulestat.store import maintenance, migrate
from joulestat.store import rows as store_rows
from joulestat.store.durability import Checkpoint, load_checkpoint, load_running_jobs
from joulestat.store.jobs import (
    JobSummary,
    by_component,
    by_unit,
    job_detail,
    list_jobs,
    part_energy,
    part_units,
)
from joulestat.store.maintenance import SETTLE_MS
from joulestat.store.nodes import node_energy_j, unattributed_check
from joulestat.store.rows import PendingJobs
from joulestat.store.schema import JOB_MINUTE_ENERGY
from joulestat.store.series import job_energy_series
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


def check_every_write_is_idempotent(engine: Engine) -> None:
    writer = writer_for(engine)
    job = make_job("train-7", T0, {"team": "nlp"})
    t = make_tick(T0 + 1, 20.0, 150.0)
    shares = shares_for(t, ("train-7",), 0)
    for _batch in range(2):  # the same things in one batch, then again in a later one
        for _again in range(2):
            writer.save_job(job)
            writer.add(t)
            writer.add_shares(t, shares)
            writer.add_units("train-7", t.t1_s, {"tokens": 100.0})
            writer.save_checkpoint({"rapl": {"0": 123}}, "boot-1", T0 + 1)
        assert writer.flush()
    writer_for(engine).flush()  # a restart registers again and writes nothing new
    assert (count(engine, "tick_energy"), count(engine, "job_energy")) == (2, len(shares))
    assert count(engine, "jobs") == count(engine, "job_nodes") == 1
    assert count(engine, "job_units") == count(engine, "node_checkpoints") == 1
    found = summary(engine, "train-7")
    assert found.total_j == pytest.approx(sum(s.energy_j for s in shares if s.job))
    assert found.units == {"tokens": 100.0}
    assert writer.maintain(T0 + 120) is not None
    assert writer.maintain(T0 + 120) is not None
    assert summary(engine, "train-7").total_j == pytest.approx(found.total_j)
    assert_conserved(engine, TRAINER.node, expected_rows=2)


def check_multi_node_job_is_one_job(engine: Engine) -> None:
    loader, trainer = writer_for(engine, LOADER), writer_for(engine, TRAINER)
    loader.save_job(make_job("dist-1", T0 + 5, {"team": "nlp"}, {11, 12}))
    trainer.save_job(make_job("dist-1", T0 + 2, {"run": "42"}, {7}))
    trainer.save_job(make_job("other", T0 + 3))
    on_loader = feed(loader, T0 + 0.5, 30, ("dist-1",), gpu=False, units={"samples": 8.0})
    on_trainer = feed(trainer, T0, 30, ("dist-1", "other"), units={"tokens": 512.0})
    assert loader.flush() and trainer.flush()

    assert count(engine, "jobs") == 2 and count(engine, "job_nodes") == 3
    found = summary(engine, "dist-1")
    assert found.nodes == (("loader-1", "c5.4xlarge"), ("trainer-1", "p4d.24xlarge"))
    assert found.labels == {"team": "nlp", "run": "42"}
    assert (found.status, found.started_s, found.ended_s) == ("running", T0 + 2, None)
    expected = job_total(on_loader, "dist-1") + job_total(on_trainer, "dist-1")
    assert found.total_j == pytest.approx(expected, rel=1e-12)
    assert found.energy_j("accelerator") == pytest.approx(sum(
        d + i for (j, c), (d, i) in on_trainer.items() if (j, c) == ("dist-1", "accelerator")))
    assert found.units == {"samples": 240.0, "tokens": 30 * 512.0}

    detail = job_detail(engine, "dist-1")
    parts = {p.node: p for p in detail.per_node}
    assert parts["loader-1"].total_j == pytest.approx(job_total(on_loader, "dist-1"))
    assert parts["trainer-1"].total_j == pytest.approx(job_total(on_trainer, "dist-1"))
    assert parts["loader-1"].pids == (11, 12) and parts["trainer-1"].instance_type == (
        "p4d.24xlarge")
    assert parts["loader-1"].units == {"samples": 240.0}
    assert set(parts["loader-1"].dynamic_j) == {"cpu"}  # the loader has no GPU

    # The job ends only when its last node ends it.
    loader.save_job(make_job("dist-1", T0 + 5, ended_s=T0 + 40))
    assert loader.flush()
    assert summary(engine, "dist-1").status == "running"
    assert [j.id for j in list_jobs(engine, running=True)] == ["dist-1", "other"]
    trainer.save_job(make_job("dist-1", T0 + 2, ended_s=T0 + 45))
    assert trainer.flush()
    ended = summary(engine, "dist-1")
    assert (ended.status, ended.ended_s) == ("ended", T0 + 45)
    assert ended.labels == {"team": "nlp", "run": "42"}
    assert [j.id for j in list_jobs(engine, running=False)] == ["dist-1"]
    assert [j.id for j in list_jobs(engine, running=True)] == ["other"]
    assert [j.id for j in list_jobs(engine, node="loader-1")] == ["dist-1"]
    assert list_jobs(engine, running=True, node="loader-1") == []
    # The list's filters, each a clause of the one id query (`joulestat jobs`).
    assert [j.id for j in list_jobs(engine, name="name-other")] == ["other"]
    assert list_jobs(engine, name="name-oth") == []
    assert [j.id for j in list_jobs(engine, kind="training", limit=1)] == ["other"]
    assert [j.id for j in list_jobs(engine, limit=5)] == ["dist-1", "other"]
    # dist-1 ended at T0 + 45 (on its last node); other still runs.
    assert [j.id for j in list_jobs(engine, running=False, since_s=T0 + 46)] == []
    assert [j.id for j in list_jobs(engine, since_s=T0 + 46)] == ["other"]
    assert [j.id for j in list_jobs(engine, running=False, since_s=T0 + 45)] == ["dist-1"]
    assert [j.id for j in list_jobs(engine, limit=1)][0] == "other"  # the newest start
    assert list_jobs(engine, limit=1)[0].total_j == summary(engine, "other").total_j
    # Re-registering reopens it.
    trainer.save_job(make_job("dist-1", T0 + 2))
    assert trainer.flush()
    assert summary(engine, "dist-1").status == "running"


def check_conservation_and_retention(engine: Engine) -> None:
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    totals = feed(writer, T0, 600, ("a", "b"), policy="exclude", units={"tokens": 3.0})
    assert writer.flush()
    # One flush of ten minutes: a job window per minute and component (migration 0009).
    assert_conserved(engine, TRAINER.node, expected_rows=2 * 10)
    before = {s.id: s for s in list_jobs(engine)}
    assert before["a"].total_j == pytest.approx(job_total(totals, "a"), rel=1e-12)
    series_before = job_energy_series(engine, "a")
    assert len(series_before) == 2 * 10
    assert sum(d + i for _t, _c, d, i in series_before) == pytest.approx(before["a"].total_j)
    units_rows = count(engine, "job_units")

    now = T0 + 600 + RETENTION_S - 270  # prunes minutes 0..4, keeps 5..9 raw
    result = writer.maintain(now)
    assert result.raw_pruned_until_ms == round((T0 + 300) * 1000)
    assert result.pruned_rows == 2 * 300
    # The job windows went with the totals (up to 2 minutes before "now", all ten
    # minutes), rolled into minutes; units were one window a minute already, and went
    # into the unit minutes (migration 0014).
    assert result.totals_until_ms == round((T0 + 900) * 1000) - SETTLE_MS
    assert result.job_pruned_rows == 0 and count(engine, "job_energy") == 0
    assert count(engine, "job_units") == 0
    assert count(engine, "job_minute_units") == units_rows == 10 * 2  # 10 minutes x 2 jobs
    # Node: minutes 0..4 rolled, 5..9 raw ticks; jobs: ten minutes; per minute, each.
    assert_conserved(engine, TRAINER.node, expected_rows=2 * 10)
    after = {s.id: s for s in list_jobs(engine)}
    for job in ("a", "b"):
        assert after[job].dynamic_j == pytest.approx(before[job].dynamic_j, rel=1e-12)
        assert after[job].idle_j == pytest.approx(before[job].idle_j, rel=1e-12)
        assert after[job].units == before[job].units == {"tokens": 1800.0}
    series = job_energy_series(engine, "a")
    assert len(series) == 2 * 10  # minutes, as the windows were
    assert series[0][0] == T0 + 60 and series[-1][0] == T0 + 600
    assert sum(d + i for _t, _c, d, i in series) == pytest.approx(before["a"].total_j)

    # A retried tick of a pruned minute is refused, not counted twice.
    late = make_tick(T0 + 10, 20.0, 150.0)
    writer.add(late)
    writer.add_shares(late, shares_for(late, ("a", "b"), 9, "exclude"))
    writer.add_units("a", late.t1_s, {"tokens": 3.0})
    assert writer.flush()
    assert writer.maintain(now).job_pruned_rows == 0
    again = {s.id: s for s in list_jobs(engine)}
    assert again["a"].total_j == pytest.approx(before["a"].total_j, rel=1e-12)
    assert again["a"].units == {"tokens": 1800.0}
    assert writer.dropped_rows == 2 + 3 * 2 + 1


def check_running_jobs_survive_a_restart(engine: Engine) -> None:
    writer = writer_for(engine)
    writer.save_job(make_job("keep", T0 + 1, {"team": "cv"}, {41, 42}))
    writer.save_job(make_job("done", T0, ended_s=T0 + 20))
    writer_for(engine, LOADER).save_job(make_job("elsewhere", T0))
    totals = feed(writer, T0, 20, ("keep", "done"), units={"images": 32.0})
    assert writer.flush()

    [job] = load_running_jobs(engine, TRAINER.node)
    assert (job.id, job.name, job.kind, job.origin) == ("keep", "name-keep", "training", "api")
    assert (job.labels, job.pids, job.started_s, job.ended_s) == (
        {"team": "cv"}, {41, 42}, T0 + 1, None)
    assert job.units == {"images": 640.0}
    for component in ("cpu", "accelerator"):
        dynamic, idle = totals[("keep", component)]
        assert job.dynamic_j[component] == pytest.approx(dynamic, rel=1e-12)
        assert job.idle_j[component] == pytest.approx(idle, rel=1e-12)
    registry = JobRegistry()
    registry.restore(job)
    assert registry.get("keep").energy_j == pytest.approx(job_total(totals, "keep"))
    assert load_running_jobs(engine, "no-such-node") == []

    # After pruning the cumulative figures are the same.
    writer.maintain(T0 + 20 + RETENTION_S + 60)
    [reloaded] = load_running_jobs(engine, TRAINER.node)
    assert reloaded.energy_j == pytest.approx(job.energy_j, rel=1e-12)
    assert reloaded.units == job.units


def check_checkpoint_round_trip(engine: Engine) -> None:
    writer = writer_for(engine)
    assert load_checkpoint(engine, TRAINER.node) is None
    state = {"counters": {"rapl:0": 123456789, "nvml:0": 42.5}, "jobs": ["a"]}
    writer.save_checkpoint(state, "boot-1", T0)
    assert load_checkpoint(engine, TRAINER.node) is None  # written with the next flush
    assert writer.flush()
    assert load_checkpoint(engine, TRAINER.node) == Checkpoint(T0, "boot-1", state)
    writer.save_checkpoint({"counters": {}}, "boot-2", T0 + 5)
    writer.save_checkpoint({"counters": {"rapl:0": 1}}, "boot-2", T0 + 6)  # latest wins
    assert writer.flush()
    assert load_checkpoint(engine, TRAINER.node) == (T0 + 6, "boot-2", {"counters": {"rapl:0": 1}})
    assert load_checkpoint(engine, LOADER.node) is None


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


@written_before_0014
def check_upgrades_keep_figures(engine: Engine) -> None:
    """``engine`` points at an empty database. Down to 0002 and up again (the totals
    backfilled from the rollups), then down to 0001 (ticks only) and up again."""
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    totals = feed(writer, T0, 600, ("a", "b"), units={"tokens": 3.0})
    # Prunes minutes 0..4; the totals cover all ten (up to 2 minutes before "now").
    result = writer.maintain(T0 + 600 + RETENTION_S - 270)
    assert result.raw_pruned_until_ms == round((T0 + 300) * 1000)
    assert result.totals_until_ms == round((T0 + 900) * 1000) - SETTLE_MS
    figures = _figures(engine)
    assert sum(figures["a"][0].values()) + sum(figures["a"][1].values()) == pytest.approx(
        job_total(totals, "a"), rel=1e-12)
    assert figures["a"][2] == {"tokens": 1800.0}
    ticks_before = node_energy_j(engine, TRAINER.node, T0, T0 + 600)

    downgrade(engine, "0002")
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    with engine.connect() as connection:
        # Backfilled to the prune boundary, which 0009's downgrade moved up to the
        # totals boundary (code before 0009 reads job rows by the prune boundary).
        assert connection.execute(text("SELECT totals_until_ms FROM nodes")).scalar() == round(
            (T0 + 900) * 1000) - SETTLE_MS
    _assert_same_figures(_figures(engine), figures)
    writer = writer_for(engine)  # an agent restarted on the upgraded store
    feed(writer, T0 + 960, 120, ("a", "b"), units={"tokens": 3.0}, totals=totals)
    assert writer.maintain(T0 + 1080 + RETENTION_S - 270) is not None
    after = _figures(engine)
    assert sum(after["b"][0].values()) + sum(after["b"][1].values()) == pytest.approx(
        job_total(totals, "b"), rel=1e-12)
    assert after["b"][2] == {"tokens": 2160.0}

    downgrade(engine, "0001")
    assert count(engine, "tick_energy") > 0
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert migrate.is_at_head(engine)
    assert node_energy_j(engine, TRAINER.node, T0, T0 + 600) == pytest.approx(ticks_before)
    assert count(engine, "jobs") == 0 and count(engine, "job_energy_totals") == 0


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


@written_before_0014
def check_0009_keeps_figures(engine: Engine) -> None:
    """``engine`` points at an empty database. A store at 0008 as the code before 0009
    left it (one job row per job, device and tick, kept raw for the retention; minute
    rollups up to the prune boundary) is upgraded: every job, node and series total is
    the same, conservation holds, and the raw job rows up to the totals boundary are
    rolled into minutes; down to 0008 and up again, the same."""
    from joulestat.store.jobs import job_detail

    assert migrate.upgrade(engine, "0008") == "0008"
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    totals: Totals = defaultdict(lambda: [0.0, 0.0])
    for i in range(600):  # a flush a tick: one row per job, device and tick, as before
        feed(writer, T0 + i, 1, ("a", "b"), units={"tokens": 3.0}, totals=totals)
        assert writer.flush()
    assert count(engine, "job_energy") == 600 * 2 * 3
    pruned_ms, totals_ms = _maintain_as_before_0009(engine, TRAINER.node,
                                                    T0 + 600 + RETENTION_S - 270)
    assert (pruned_ms, totals_ms) == (round((T0 + 300) * 1000), round((T0 + 780) * 1000))
    raw_left = count(engine, "job_energy")
    assert raw_left == 300 * 2 * 3  # minutes 5..9 raw, as the retention kept them
    figures = _figures(engine)
    assert sum(figures["a"][0].values()) + sum(figures["a"][1].values()) == pytest.approx(
        job_total(totals, "a"), rel=1e-12)
    node_before = node_energy_j(engine, TRAINER.node, T0, T0 + 600)
    series_before = {job: sum(d + i for _t, _c, d, i in job_energy_series(engine, job))
                     for job in ("a", "b")}
    detail_before = job_detail(engine, "a")

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    _assert_same_figures(_figures(engine), figures)
    assert node_energy_j(engine, TRAINER.node, T0, T0 + 600) == pytest.approx(node_before,
                                                                              rel=1e-12)
    for job, joules in series_before.items():
        assert sum(d + i for _t, _c, d, i in job_energy_series(engine, job)) == pytest.approx(
            joules, rel=1e-12)
    detail = job_detail(engine, "a")
    assert detail is not None and detail_before is not None
    assert detail.dynamic_j == pytest.approx(detail_before.dynamic_j, rel=1e-12)
    assert detail.units == pytest.approx(detail_before.units, rel=1e-12)
    assert count(engine, "job_energy") == 0  # all ten minutes were behind the totals
    # A unit row a minute and job, moved out of job_units by migration 0014.
    assert (count(engine, "job_units"), count(engine, "job_minute_units")) == (0, 10 * 2)
    assert_conserved(engine, TRAINER.node, expected_rows=2 * 10)

    # Down (the prune boundary moves up to the totals boundary) and up again.
    downgrade(engine, "0008")
    _assert_same_figures(_figures(engine), figures)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    _assert_same_figures(_figures(engine), figures)
    assert node_energy_j(engine, TRAINER.node, T0, T0 + 600) == pytest.approx(node_before,
                                                                              rel=1e-12)
    # Today's writer goes on where the old one stopped.
    writer = writer_for(engine)
    more = feed(writer, T0 + 960, 120, ("a", "b"), units={"tokens": 3.0})
    assert writer.flush() and writer.maintain(T0 + 1080 + RETENTION_S - 270) is not None
    after = _figures(engine)
    assert sum(after["b"][0].values()) + sum(after["b"][1].values()) == pytest.approx(
        job_total(totals, "b") + job_total(more, "b"), rel=1e-12)
    assert_conserved(engine, TRAINER.node)


@written_before_0014
def check_0010_keeps_sources(engine: Engine) -> None:
    """``engine`` points at an empty database. A store at 0009 whose CPU source changed
    from RAPL to an estimate after five minutes is upgraded: each job's totals split by
    source as its shares were (the readers' energy by source and sources, what bounds are
    made of), the totals per component the same to the last bit; down to 0009 and up
    again, the same; today's writer then adds into the totals by source."""
    from joulestat.store.provenance import job_sources, jobs_energy_by_source

    estimate = "model:ccf-vcpu"
    assert migrate.upgrade(engine, "0009") == "0009"
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    expected: defaultdict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])

    def run(start_s: float, count: int, cpu_source: str) -> None:
        for i in range(count):
            t = make_tick(start_s + i + 1, 20.0 + i % 7, 150.0 + i % 11, cpu_source)
            shares = shares_for(t, ("a", "b"), i)
            writer.add(t)
            writer.add_shares(t, shares)
            for share in shares:
                if share.job is not None:
                    cell = expected[(share.job, share.component, share.source)]
                    cell[0] += share.dynamic_j
                    cell[1] += share.idle_j
        assert writer.flush()

    def by_source() -> dict[tuple[str, str, str], list[float]]:
        return {(row.job_id, row.component, row.source): [row.dynamic_j, row.idle_j]
                for rows in jobs_energy_by_source(engine, ["a", "b"]).values() for row in rows}

    def assert_by_source() -> None:
        found = by_source()
        assert found.keys() == expected.keys()
        for key, (dynamic_j, idle_j) in expected.items():
            assert found[key] == pytest.approx([dynamic_j, idle_j], rel=1e-9), key

    run(T0, 300, "rapl")  # minutes 0..4 measured, 5..9 estimated: whole minutes each
    run(T0 + 300, 300, estimate)
    with totals_before_0010():  # totals over all ten minutes, without a source
        result = writer.maintain(T0 + 600 + 180)
    assert result is not None and result.totals_until_ms >= round((T0 + 600) * 1000)
    assert count(engine, "job_energy") == 0  # every share is in the totals and minutes
    figures = part_figures(engine)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert part_figures(engine) == figures  # exact: the split's parts add up to the total
    assert_by_source()
    assert job_sources(engine, "a") == {"accelerator": ["nvml_energy"],
                                        "cpu": [estimate, "rapl"]}

    downgrade(engine, "0009")
    assert part_figures(engine) == figures
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert_by_source()

    # Today's writer goes on: its shares are summed into the totals by their own source.
    writer = writer_for(engine)
    run(T0 + 840, 120, "rapl")
    assert writer.maintain(T0 + 960 + 180) is not None
    assert count(engine, "job_energy") == 0
    assert_by_source()


def _by_component(series: list[tuple[float, str, float, float]]) -> dict[str, float]:
    summed: defaultdict[str, float] = defaultdict(float)
    for _t, component, dynamic_j, idle_j in series:
        summed[component] += dynamic_j + idle_j
    return dict(summed)


@written_before_0014
def check_0011_keeps_job_minutes(engine: Engine) -> None:
    """``engine`` points at an empty database. A store at 0010 holding two jobs' minutes
    is upgraded: every job minute is kept, each job's series and the node's conservation
    read the same. On PostgreSQL the table then has no unique key but a (job_id, node)
    index; a row written twice (which no writer does) is summed by the readers, and the
    downgrade sums it into one row under the restored key, no joule lost. Up again,
    today's writer rolls its next minutes and deleting a job moves its minutes into the
    remainder, conservation holding."""
    from joulestat.store.job_delete import delete_jobs

    node = TRAINER.node
    assert migrate.upgrade(engine, "0010") == "0010"
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0, ended_s=T0 + 600))
    feed(writer, T0, 600, ("a", "b"))
    result = writer.maintain(T0 + 600 + 180)
    assert result is not None and result.totals_until_ms >= round((T0 + 600) * 1000)
    series = {job: job_energy_series(engine, job) for job in ("a", "b")}
    minutes = count(engine, "job_minute_energy")
    assert minutes >= 2 * 10 * 2  # two jobs, ten minutes, two devices
    assert_conserved(engine, node)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert count(engine, "job_minute_energy") == minutes
    assert {job: job_energy_series(engine, job) for job in ("a", "b")} == series
    assert_conserved(engine, node)

    def energy_j() -> float:
        with engine.connect() as connection:
            return connection.execute(text(
                "SELECT sum(dynamic_j + idle_j) FROM job_minute_energy")).scalar_one()

    if engine.dialect.name == "postgresql":
        whole_j = energy_j()
        with engine.begin() as connection:
            doubled_j = connection.execute(text(
                "INSERT INTO job_minute_energy SELECT * FROM job_minute_energy "
                "WHERE job_id = 'a' AND component = 'cpu' ORDER BY minute_start_s LIMIT 1 "
                "RETURNING dynamic_j + idle_j")).scalar_one()
        doubled = _by_component(series["a"])
        doubled["cpu"] += doubled_j
        assert _by_component(job_energy_series(engine, "a")) == pytest.approx(doubled, rel=1e-12)
        downgrade(engine, "0010")
        assert count(engine, "job_minute_energy") == minutes
        assert energy_j() == pytest.approx(whole_j + doubled_j, rel=1e-12)
        with engine.begin() as connection:
            key = connection.execute(text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conname = 'pk_job_minute_energy'")).scalar_one()
            connection.execute(text(  # the injected double, taken out again
                "UPDATE job_minute_energy SET dynamic_j = dynamic_j / 2, idle_j = idle_j / 2 "
                "WHERE job_id = 'a' AND component = 'cpu' AND minute_start_s = "
                "(SELECT min(minute_start_s) FROM job_minute_energy WHERE job_id = 'a')"))
        assert key == "PRIMARY KEY (job_id, node, minute_start_s, component, device)"
        for job in ("a", "b"):
            assert _by_component(job_energy_series(engine, job)) == pytest.approx(
                _by_component(series[job]), rel=1e-12)
        assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    else:
        downgrade(engine, "0010")  # nothing to do on SQLite, where the key stays
        assert count(engine, "job_minute_energy") == minutes
        assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert_conserved(engine, node)

    writer = writer_for(engine)
    writer.save_job(make_job("c", T0 + 900))
    feed(writer, T0 + 900, 300, ("c",))
    assert writer.maintain(T0 + 1200 + 180) is not None
    assert count(engine, "job_minute_energy") > minutes
    assert_conserved(engine, node)
    delete_jobs(engine, ["a"])
    with engine.connect() as connection:
        left = connection.execute(text(
            "SELECT count(*) FROM job_minute_energy WHERE job_id = 'a'")).scalar_one()
    assert left == 0
    assert_conserved(engine, node)


def check_0014_moves_unit_minutes(engine: Engine) -> None:
    """``engine`` points at an empty database. A store at 0013 written as before 0014
    (each settled minute's unit rows merged into one ``job_units`` row) with a row an
    import left at a bin's end is upgraded: the merged rows move into
    ``job_minute_units``, the raw rows after the boundary and the imported one stay, and
    every job's units, unit rows and unit series read the same. Down to 0013,
    ``job_units`` is again exactly what it was. Up again, today's passes move the next
    minutes and the units still add up to what was counted."""
    from joulestat.store.jobs import job_detail
    from joulestat.store.series import job_unit_rows, job_unit_series

    def units_of(job: str) -> dict[str, float]:
        detail = job_detail(engine, job)
        assert detail is not None
        return dict(detail.units)

    def figures() -> dict[str, tuple[Any, ...]]:
        return {job: (units_of(job), job_unit_rows(engine, job),
                      job_unit_series(engine, job, 60)) for job in ("a", "b")}

    def job_units() -> list[tuple[Any, ...]]:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(
                "SELECT job_id, node, t_end_ms, unit, count FROM job_units "
                "ORDER BY job_id, node, t_end_ms, unit"))]

    assert migrate.upgrade(engine, "0013") == "0013"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(maintenance, "roll_up_units", compact_units_as_before_0014)
        writer = writer_for(engine)
        for job in ("a", "b"):
            writer.save_job(make_job(job, T0))
        feed(writer, T0, 600, ("a", "b"), units={"tokens": 3.0})
        assert writer.flush()
        result = writer.maintain(T0 + 660)
    boundary_ms = round((T0 + 540) * 1000)
    assert result is not None and result.totals_until_ms == boundary_ms
    imported_ms = round((T0 + 90.5) * 1000)  # a bin's end, not a minute's
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO job_units (job_id, node, t_end_ms, unit, count) "
            "VALUES ('a', :node, :t, 'samples', 7.0)"), {"node": TRAINER.node, "t": imported_ms})
    before_rows = job_units()
    merged = [r for r in before_rows if r[2] <= boundary_ms and r[2] % 60_000 == 0]
    assert len(merged) == 2 * 9  # minutes 1..9 of two jobs
    kept = [r for r in before_rows if r not in merged]
    assert len(kept) > 1 and all(r[2] > boundary_ms for r in kept if r[2] != imported_ms)

    assert migrate.upgrade(engine, "0014") == "0014"
    before = figures()
    assert count(engine, "job_minute_units") == len(merged)
    assert job_units() == kept
    for job in ("a", "b"):
        assert before[job][0] == {"tokens": pytest.approx(3.0 * 600, rel=1e-12)}
        assert sum(c for _n, _t, u, c in before[job][1] if u == "tokens") == pytest.approx(
            3.0 * 600, rel=1e-12)
    assert [t for _n, t, _u, _c in before["b"][1]][:9] == [T0 + 60 * m for m in range(1, 10)]
    assert (TRAINER.node, imported_ms / 1000, "samples", 7.0) in before["a"][1]

    downgrade(engine, "0013")
    assert job_units() == before_rows
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert figures() == before

    writer = writer_for(engine)
    feed(writer, T0 + 600, 300, ("a", "b"), units={"tokens": 3.0})
    assert writer.flush() and writer.maintain(T0 + 900 + 180) is not None
    assert count(engine, "job_minute_units") == 2 * 15  # minutes 1..15 of two jobs
    assert job_units() == [("a", TRAINER.node, imported_ms, "samples", 7.0)]
    for job in ("a", "b"):
        assert units_of(job) == {"tokens": pytest.approx(3.0 * 900, rel=1e-12)}
