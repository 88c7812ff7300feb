"""A store for ``joulestat compare``, filled through the real store API (StoreWriter).

Ticks of 900 s carry the energy (a node's tick is any interval), shares give it to the
jobs, units are counted per tick, and each job's node is held from its start to its
end. Intensity and PUE are pinned (:data:`PINNED`: 400 g/kWh, PUE 1.0) so CO2e is
hand-computable; prices are the catalog's, read here through ``catalog.lookup``.
:func:`compare_invoke` runs ``joulestat compare`` on such a store in this process,
:func:`compare_cli` as a process. :func:`assert_pooled_is_per_job` checks the pooled
comparison by setup (``compare_setups``) against the per-job one.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from joulestat.carbon.catalog import lookup
from joulestat.carbon.footprint import CarbonSettings
from joulestat.carbon.pricing import Pricer
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo, Share
from joulestat.core.tick import Tick, TickEntry
from joulestat.reports.compare.figures import figures_for, pick_jobs
from joulestat.reports.compare.setups import compare_setups
from joulestat.reports.compare.table import compare
from joulestat.store import migrate
from joulestat.store.engine import dialect_insert, make_engine
from joulestat.store.job_pools import multi_node_ids, units_by_kind, units_counted
from joulestat.store.jobs import JobFilter, job_totals
from joulestat.store.maintenance import advance_totals, maintain_node
from joulestat.store.schema import NODES
from joulestat.store.writer import StoreWriter
from tests.helpers.agent_process import run_cli
from tests.helpers.cli import CliResult, invoke

T0 = 1_700_000_040.0
TICK_S = 900.0
PINNED = ("--carbon-intensity", "400", "--pue", "1.0")
SETTINGS = CarbonSettings(carbon_intensity_g_per_kwh=400, pue=1.0)
NOW = T0 + 86_400  # a whole minute, as a totals boundary is
G5 = lookup("g5.xlarge").usd_per_hour
INF2 = lookup("inf2.xlarge").usd_per_hour
P4D = lookup("p4d.24xlarge").usd_per_hour
C6I = lookup("c6i.4xlarge").usd_per_hour
DEVICES = [DeviceInfo("cpu", "0", "rapl", index=0),
           DeviceInfo("accelerator", "0", "nvml_energy", model="GPU", uuid="GPU-1", index=0)]


def node(name: str, instance_type: str) -> NodeInfo:
    return NodeInfo(name, instance_type, "us-east-1", "Xeon", "0.1.0")


def run_job(engine: Engine, where: NodeInfo, job: JobRecord, ticks: int, gpu_j: float,
            units: dict[str, float] | None = None, from_s: float | None = None) -> None:
    """``ticks`` ticks of TICK_S from the job's start (or ``from_s``) on ``where``, each
    ``gpu_j`` of GPU energy given to the job (80 % dynamic, 20 % idle) plus 10 J of CPU
    nobody gets."""
    writer = StoreWriter(engine, where, DEVICES, raw_retention_s=7 * 86400)
    writer.save_job(job)
    start = job.started_s if from_s is None else from_s
    for i in range(ticks):
        tick = Tick(start + i * TICK_S, start + (i + 1) * TICK_S, (
            TickEntry("cpu", "0", "rapl", 10.0),
            TickEntry("accelerator", "0", "nvml_energy", gpu_j)))
        writer.add(tick)
        writer.add_shares(tick, [
            Share(job.id, "accelerator", "0", "nvml_energy", 0.8 * gpu_j, 0.2 * gpu_j),
            Share(None, "cpu", "0", "rapl", 10.0, 0.0)])
        if units:
            writer.add_units(job.id, tick.t1_s, units)
    assert writer.flush()


def job(job_id: str, name: str, kind: str, started_s: float, held_s: float) -> JobRecord:
    return JobRecord(id=job_id, name=name, kind=kind, labels={}, pids=frozenset({1}),
                     started_s=started_s, origin="api", ended_s=started_s + held_s)


def fill_compare_store(url: str) -> None:
    """g5 (1 h, 360 kJ, 10 000 inferences), then inf2 (0.5 h, 90 kJ, 31 500 inferences),
    a loader-fed trainer (c6i + p4d, 1 h each, samples on the trainer), a training run
    that counts nothing, and an inference job on an unpriced laptop; all ended."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    run_job(engine, node("g5-1", "g5.xlarge"), job("j-g5", "bert-g5", "inference", T0, 3600),
            ticks=4, gpu_j=90_000.0, units={"inference": 2_500})
    run_job(engine, node("inf2-1", "inf2.xlarge"),
            job("j-inf2", "bert-inf2", "inference", T0 + 3600, 1800),
            ticks=2, gpu_j=45_000.0, units={"inference": 15_750})
    dist = job("j-dist", "resnet-dist", "training", T0 + 7200, 3600)
    run_job(engine, node("c6i-1", "c6i.4xlarge"), dist, ticks=4, gpu_j=18_000.0)
    run_job(engine, node("p4d-1", "p4d.24xlarge"), dist, ticks=4, gpu_j=3_600_000.0,
            units={"sample": 250_000})
    run_job(engine, node("p4d-2", "p4d.24xlarge"),
            job("j-plain", "resnet-plain", "training", T0 + 10_800, 1800), ticks=2,
            gpu_j=3_000_000.0)
    run_job(engine, node("laptop", "local"),
            job("j-laptop", "bert-laptop", "inference", T0 + 14_400, 3600), ticks=4,
            gpu_j=9_000.0, units={"inference": 250})
    engine.dispose()


def compare_cli(url: str, *args: str):
    return run_cli("compare", "--db", url, *args)


def compare_invoke(url: str, *args: str) -> CliResult:
    """``joulestat compare --db URL ARGS`` in this process (tests/helpers/cli.py)."""
    return invoke("compare", "--db", url, *args)


def runs_store(url: str, runs: int) -> Engine:
    """``runs`` stored runs of one name (``bert-g5``, ids ``j-000``...), an hour apart,
    on two nodes: a comparison whose jobs grow while the nodes it reads do not."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    for i in range(runs):
        run_job(engine, node(f"g5-{i % 2}", "g5.xlarge"),
                job(f"j-{i:03d}", "bert-g5", "inference", T0 + i * 3600, 900),
                ticks=1, gpu_j=9_000.0, units={"inference": 100})
    return engine


def settle(engine: Engine, name: str, until_s: float) -> None:
    """Move node ``name``'s totals boundary to ``until_s`` (what its maintain pass does
    two minutes after the minute); none of the rest of the pass (no rollup of ticks or
    prune)."""
    with engine.begin() as connection:
        before = connection.execute(select(NODES.c.totals_until_ms)
                                    .where(NODES.c.node == name)).scalar()
        advance_totals(connection, dialect_insert(engine), name, before,
                       round(until_s * 1000))


def _close(a: Any, b: Any, scale: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * scale)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y, scale) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], scale) for k in a)
    return a == b


def assert_pooled_is_per_job(engine: Engine, kind: str | None, unit: str | None = None,
                             settings: CarbonSettings = SETTINGS, now_s: float = NOW,
                             since_s: float | None = None, until_s: float | None = None,
                             with_ids: bool = True, **options: Any) -> None:
    """The pooled table of the jobs of ``kind`` (in the window, when given) equals the
    per-job one, row by row and field by field, with the same notes and instance
    types."""
    where = JobFilter(kind=kind, since_s=since_s, until_s=until_s)
    refs = pick_jobs(engine, kind).refs
    if (since_s, until_s) != (None, None):
        wanted = {job.id for job in job_totals(engine, where)}
        refs = [ref for ref in refs if ref.id in wanted]
    figures = figures_for(engine, refs, settings, now_s=now_s)
    expected = compare(figures, by="instance_type", unit=unit, **options)
    # Which unit a comparison is per when none is asked: per unit, the jobs that
    # counted some of it, each once (a summed day's from its sums, the others by id).
    counted: dict[str, int] = {}
    for totals in job_totals(engine, where):
        for name, count in totals.units.items():
            counted[name] = counted.get(name, 0) + (count > 0)
    assert units_counted(engine, where, multi_node_ids(engine, where)) == {
        name: jobs for name, jobs in counted.items() if jobs}
    if kind is not None and (since_s, until_s) == (None, None):
        # The Compare page's units of the kind, most counted first (its default the unit
        # `joulestat compare` picks), ties by name.
        assert units_by_kind(engine).get(kind, []) == sorted(
            (name for name, jobs in counted.items() if jobs),
            key=lambda name: (-counted[name], name))
    found = compare_setups(engine, where, Pricer(settings), now_s, unit=unit,
                           with_ids=with_ids, **options)
    assert found is not None
    assert found.jobs == len(figures)
    assert (found.table.by, found.table.unit, found.table.baseline) == (
        expected.by, expected.unit, expected.baseline)
    assert [r.group for r in found.table.rows] == [r.group for r in expected.rows]
    for mine, theirs in zip(found.table.rows, expected.rows, strict=True):
        got, wanted = asdict(mine), asdict(theirs)
        if not with_ids:
            wanted["job_ids"] = ()
        scale = abs(theirs.runs_mean_j or 0.0)  # a spread of equal runs is 0 to rounding
        for field, value in wanted.items():
            assert _close(got[field], value, scale), (theirs.group, field, got[field], value)
    notes = list(dict.fromkeys(f"{f.name}: {note}" for f in figures for note in f.notes))
    assert sorted(found.notes) == sorted(notes)
    assert found.instance_types == tuple(sorted({n.instance_type for f in figures
                                                 for n in f.nodes}))


def maintain_every_node(engine: Engine, now_s: float) -> None:
    """Every node's maintain pass at ``now_s``, as its agent runs it."""
    insert = dialect_insert(engine)
    with engine.connect() as connection:
        nodes = list(connection.execute(select(NODES.c.node)).scalars())
    for name in nodes:
        with engine.begin() as connection:
            maintain_node(connection, insert, name, now_s, 30 * 86_400)
