"""Jobs measured elsewhere, written into the store so they read like measured ones.

An imported job knows, per node, what it used in total (per component, dynamic and
idle), when the node started and ended, and its units of work; a joulestat report also
carries the node's profile, its energy per time bin and the units counted per bin.
Each bin becomes one row per component spanning the bin (``t_start_ms`` to
``t_end_ms``) in ``job_energy`` and the same energy in ``tick_energy``, so
:func:`~joulestat.store.jobs.list_jobs`, :func:`~joulestat.store.jobs.job_detail`,
the charts, the carbon layer and the reports see the job with its shape, and the
conservation check still holds (job rows = node rows). A component without a series (a
CodeCarbon run, a report made before series existed) is one row over the node's whole
time. Units go to ``job_units`` at their bin's end, or at the node's end.

Rows of imports are marked by their device, ``import:<job id>``, and their source
(``import:joulestat``, ``import:codecarbon``, with the original provenance after a
``/``). Re-importing a job part deletes the part's previous imported rows first, so
importing the same file twice changes nothing (and the part is reported
``unchanged``: its stored rows are already exactly the ones it would write), and a
newer export of the same job replaces the older one. A part the store already holds as
measured data (rows with other devices) is left alone: importing a report into the
store it came from must not count the job twice. The job row is inserted, or merged
into the stored one (labels and agent labels key by key, the earliest start) only when
that changes it; a placeholder label value (``[redacted]`` from a report) never
overwrites a value the store holds. Agent labels merge as the agent's writer merges them
(:func:`joulestat.attribution.agent_labels.merge_agent_labels`: two idle policies make
``mixed``).

Where a node name already exists with a prune boundary (a live node whose old raw
rows have been rolled up), a node row ending before the boundary goes to
``minute_energy`` instead (summed per minute), where queries look for rows that old;
a job row ending at or before the node's totals boundary goes to ``job_minute_energy``
and is added to the job totals, which is where readers take job rows that old (see
:mod:`joulestat.store.maintenance`).

Everything of one call runs in the caller's single transaction
(:func:`write_imported_jobs`), so a bad file imports nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, delete, exists, select, update
from sqlalchemy.engine import Connection, Engine

from joulestat.attribution.agent_labels import merge_agent_labels
from joulestat.store.engine import dialect_insert
from joulestat.store.rows import _status_update
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_MINUTE_ENERGY,
    JOB_MINUTE_UNITS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
    MINUTE_ENERGY,
    MINUTE_MS,
    NODES,
    TICK_ENERGY,
)

IMPORT_DEVICE_PREFIX = "import:"
# (t_start_s, t_end_s, component, dynamic_j, idle_j): one bin of a node's profile
EnergyBin = tuple[float, float, str, float, float]


class ImportConflict(ValueError):
    """The store holds something the import cannot merge with (e.g. same id, other kind)."""


@dataclass(frozen=True, slots=True)
class ImportedNode:
    """One node's part of an imported job. Energies in joules per component."""

    node: str
    instance_type: str
    region: str
    started_s: float
    ended_s: float
    dynamic_j: Mapping[str, float]
    idle_j: Mapping[str, float]
    units: Mapping[str, float] = field(default_factory=dict)
    source: str = "import"
    # per-component source, overriding ``source`` (keeps the original provenance)
    sources: Mapping[str, str] = field(default_factory=dict)
    agent_version: str = ""
    cpu_model: str = ""
    # the node's profile: energy bins (components without bins: one row over the
    # node's time) and (t_end_s, unit, count) points (units without: at the end)
    series: tuple[EnergyBin, ...] = ()
    unit_series: tuple[tuple[float, str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ImportedJob:
    id: str
    name: str
    kind: str
    labels: Mapping[str, str]
    origin: str
    started_s: float
    nodes: tuple[ImportedNode, ...]
    # a label value that stands for a hidden one (a redacted report's): it never
    # replaces a value the store holds
    placeholder: str | None = None
    # what joulestat recorded about how it measured the job (cpu_source, idle_policy)
    agent_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ImportResult:
    """What a call wrote: (job id, node) parts, and parts skipped with the reason."""

    written: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)


def _ms(t_s: float) -> int:
    return round(t_s * 1000)


def _check(job: ImportedJob) -> None:
    for part in job.nodes:
        numbers = [part.started_s, part.ended_s, *part.dynamic_j.values(),
                   *part.idle_j.values(), *part.units.values(),
                   *(x for b in part.series for x in (b[0], b[1], b[3], b[4])),
                   *(x for p in part.unit_series for x in (p[0], p[2]))]
        if not all(math.isfinite(n) for n in numbers):
            raise ValueError(f"job {job.id!r} node {part.node!r}: non-finite number")
        if part.ended_s < part.started_s:
            raise ValueError(f"job {job.id!r} node {part.node!r}: ends before it starts")


def write_imported_jobs(engine: Engine, jobs: Sequence[ImportedJob]) -> ImportResult:
    """Write ``jobs`` in one transaction (all or nothing); see the module doc."""
    for job in jobs:
        _check(job)
    insert = dialect_insert(engine)
    result = ImportResult()
    with engine.begin() as connection:
        for job in sorted(jobs, key=lambda j: j.id):  # one lock order, as the agent's writer
            _write_job(connection, insert, job, result)
    return result


def _merged_labels(stored: dict[str, str], job: ImportedJob) -> dict[str, str]:
    """Stored labels updated by the job's, except that a placeholder for a hidden value
    (a redacted report's) never overwrites a stored value."""
    merged = dict(stored)
    for key, value in job.labels.items():
        if not (value == job.placeholder and key in stored):
            merged[key] = value
    return merged


def _save_job_row(connection: Connection, job: ImportedJob) -> bool:
    """Insert the job, or merge into the stored one (labels, earliest start), writing
    only when something changes, so a repeated import leaves the row as it was;
    whether it wrote."""
    jobs = JOBS.c
    stored = connection.execute(
        select(jobs.name, jobs.kind, jobs.labels, jobs.created_s, jobs.agent_labels)
        .where(jobs.id == job.id).with_for_update()).first()
    if stored is None:
        ended = [p.ended_s for p in job.nodes]
        connection.execute(JOBS.insert(), [{
            "id": job.id, "name": job.name, "kind": job.kind,
            "labels": json.dumps(dict(job.labels), sort_keys=True), "origin": job.origin,
            "created_s": float(job.started_s), "ended_s": max(ended) if ended else None,
            "status": "ended",
            "agent_labels": json.dumps(dict(job.agent_labels), sort_keys=True),
        }])
        return True
    if (stored.name, stored.kind) != (job.name, job.kind):
        raise ImportConflict(f"job {job.id!r} is already in the store as {stored.kind} job "
                             f"{stored.name!r}, not {job.kind} job {job.name!r}")
    labels, agent_labels = json.loads(stored.labels), json.loads(stored.agent_labels)
    merged = _merged_labels(labels, job)
    merged_agent = merge_agent_labels(agent_labels, {
        k: v for k, v in job.agent_labels.items()
        if not (v == job.placeholder and k in agent_labels)})
    created_s = min(float(stored.created_s), float(job.started_s))
    if merged != labels or merged_agent != agent_labels or created_s != stored.created_s:
        connection.execute(update(JOBS).where(jobs.id == job.id).values(
            labels=json.dumps(merged, sort_keys=True), created_s=created_s,
            agent_labels=json.dumps(merged_agent, sort_keys=True)))
        return True
    return False


def _write_job(connection: Connection, insert: Any, job: ImportedJob,
               result: ImportResult) -> None:
    changed = _save_job_row(connection, job)  # the job's row locked first, as the writer
    device = IMPORT_DEVICE_PREFIX + job.id
    for part in sorted(job.nodes, key=lambda p: p.node):
        if _measured_here(connection, job.id, part.node, device):
            result.skipped.append(f"job {job.id!r} on node {part.node!r} is already in the "
                                  "store as measured data: kept, not imported again")
            continue
        boundaries = _ensure_node(connection, insert, part)
        planned = _plan(job.id, device, part, *boundaries)
        if not changed and _stored(connection, job.id, part.node, device) == planned.key():
            result.unchanged.append((job.id, part.node))
            continue
        _clear_part(connection, job.id, part.node, device)
        _write_rows(connection, planned)
        result.written.append((job.id, part.node))
    connection.execute(_status_update([job.id]))


def _measured_here(connection: Connection, job_id: str, node: str, device: str) -> bool:
    raw, rolled = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c
    in_raw = exists().where(raw.job_id == job_id, raw.node == node, raw.device != device)
    in_rolled = exists().where(rolled.job_id == job_id, rolled.node == node,
                               rolled.device != device)
    return bool(connection.execute(select(in_raw | in_rolled)).scalar())


def _ensure_node(connection: Connection, insert: Any,
                 part: ImportedNode) -> tuple[int | None, int | None]:
    """Create the node row if it is new (an existing node keeps its own data); return
    its prune and totals boundaries, the row locked against a maintain pass moving
    them (PostgreSQL) until this import commits."""
    statement = insert(NODES).values(
        node=part.node, instance_type=part.instance_type, region=part.region,
        cpu_model=part.cpu_model, agent_version=part.agent_version,
        first_seen_s=part.started_s, last_seen_s=part.ended_s,
    ).on_conflict_do_nothing(index_elements=["node"])
    connection.execute(statement)
    pruned_ms, totals_ms = connection.execute(
        select(NODES.c.raw_pruned_until_ms, NODES.c.totals_until_ms)
        .where(NODES.c.node == part.node).with_for_update()).one()
    return pruned_ms, totals_ms


# The tables a part writes, and the columns that say what it holds, in key order.
_PART_TABLES: tuple[tuple[Any, tuple[str, ...]], ...] = (
    (JOB_NODES, ("instance_type", "region", "started_s", "ended_s")),
    (JOB_ENERGY, ("t_end_ms", "component", "t_start_ms", "dynamic_j", "idle_j", "source")),
    (JOB_MINUTE_ENERGY, ("minute_start_s", "component", "dynamic_j", "idle_j")),
    (JOB_UNITS, ("t_end_ms", "unit", "count")),
    (JOB_MINUTE_UNITS, ("minute_start_s", "unit", "count")),
    (JOB_ENERGY_TOTALS, ("component", "source", "dynamic_j", "idle_j")),
    (JOB_UNIT_TOTALS, ("unit", "count")),
)
_NODE_TABLES: tuple[tuple[Any, tuple[str, ...]], ...] = (
    (TICK_ENERGY, ("t_end_ms", "component", "t_start_ms", "energy_j", "source")),
    (MINUTE_ENERGY, ("minute_start_s", "component", "energy_j", "covered_s", "source")),
)


@dataclass
class _Planned:
    """Rows one part writes, per table (each a dict of column values)."""

    job_id: str
    node: str
    device: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, table: Any, row: dict[str, Any]) -> None:
        self.rows.setdefault(table.name, []).append(row)

    def key(self) -> dict[str, list[tuple[Any, ...]]]:
        """What :func:`_stored` reads back when these rows are in the store."""
        return {table.name: sorted(tuple(r[c] for c in columns)
                                   for r in self.rows.get(table.name, []))
                for table, columns in (*_PART_TABLES, *_NODE_TABLES)}


def _stored(connection: Connection, job_id: str, node: str,
            device: str) -> dict[str, list[tuple[Any, ...]]]:
    """The part's rows as stored, in :meth:`_Planned.key`'s shape."""
    found = {}
    for table, columns in _PART_TABLES:
        query = select(*(table.c[c] for c in columns)).where(
            table.c.job_id == job_id, table.c.node == node)
        found[table.name] = sorted(tuple(r) for r in connection.execute(query))
    for table, columns in _NODE_TABLES:
        query = select(*(table.c[c] for c in columns)).where(
            table.c.node == node, table.c.device == device)
        found[table.name] = sorted(tuple(r) for r in connection.execute(query))
    return found


def _clear_part(connection: Connection, job_id: str, node: str, device: str) -> None:
    """Remove what an earlier import of this part wrote (the part holds nothing else)."""
    for table in (JOB_ENERGY, JOB_MINUTE_ENERGY, JOB_UNITS, JOB_MINUTE_UNITS,
                  JOB_ENERGY_TOTALS, JOB_UNIT_TOTALS, JOB_NODES):
        connection.execute(delete(table).where(table.c.job_id == job_id,
                                               table.c.node == node))
    for table in (TICK_ENERGY, MINUTE_ENERGY):
        connection.execute(delete(table).where(and_(table.c.node == node,
                                                    table.c.device == device)))


def _bins(part: ImportedNode) -> list[EnergyBin]:
    """The part's bins, and one bin over the node's time per component without any."""
    binned = {b[2] for b in part.series}
    whole = [(part.started_s, part.ended_s, c, float(part.dynamic_j.get(c, 0.0)),
              float(part.idle_j.get(c, 0.0)))
             for c in sorted(set(part.dynamic_j) | set(part.idle_j)) if c not in binned]
    return [*part.series, *whole]


def _plan(job_id: str, device: str, part: ImportedNode, pruned_ms: int | None,
          totals_ms: int | None) -> _Planned:
    """Every row the part writes: a bin's node row is raw after the node's prune
    boundary and joins its minute's rollup before it; its job row likewise by the
    totals boundary, where it is also summed into the job totals (module doc)."""
    planned = _Planned(job_id, part.node, device)
    planned.add(JOB_NODES, {"job_id": job_id, "node": part.node,
                            "instance_type": part.instance_type, "region": part.region,
                            "started_s": float(part.started_s),
                            "ended_s": float(part.ended_s), "pids": "[]"})
    minutes: dict[tuple[int, str], list[float]] = {}
    job_minutes: dict[tuple[int, str], list[float]] = {}
    totals: dict[str, list[float]] = {}
    key = {"node": part.node, "device": device}
    for t0, t1, component, dynamic_j, idle_j in _bins(part):
        start_ms, end_ms = _ms(t0), _ms(t1)
        source = part.sources.get(component, part.source)
        row = {**key, "component": component, "t_end_ms": end_ms, "t_start_ms": start_ms}
        minute = ((end_ms - 1) // MINUTE_MS * 60, component)
        # The node's rows by its prune boundary, the job's by its totals boundary (the
        # job tables' own): each where the readers look for it.
        if pruned_ms is not None and end_ms <= pruned_ms:
            cell = minutes.setdefault(minute, [0.0, 0.0])
            cell[0] += dynamic_j + idle_j
            cell[1] += (end_ms - start_ms) / 1000
        else:
            planned.add(TICK_ENERGY, {**row, "energy_j": dynamic_j + idle_j,
                                      "source": source})
        if totals_ms is not None and end_ms <= totals_ms:
            job_cell = job_minutes.setdefault(minute, [0.0, 0.0])
            job_cell[0] += dynamic_j
            job_cell[1] += idle_j
            total = totals.setdefault(component, [0.0, 0.0])
            total[0] += dynamic_j
            total[1] += idle_j
        else:
            planned.add(JOB_ENERGY, {**row, "job_id": job_id, "dynamic_j": dynamic_j,
                                     "idle_j": idle_j, "source": source})
    for (minute_s, component), (energy_j, covered_s) in sorted(minutes.items()):
        row = {**key, "component": component, "minute_start_s": minute_s}
        planned.add(MINUTE_ENERGY, {**row, "energy_j": energy_j, "covered_s": covered_s,
                                    "source": part.sources.get(component, part.source)})
    for (minute_s, component), (dynamic_j, idle_j) in sorted(job_minutes.items()):
        row = {**key, "component": component, "minute_start_s": minute_s}
        planned.add(JOB_MINUTE_ENERGY, {**row, "job_id": job_id, "dynamic_j": dynamic_j,
                                        "idle_j": idle_j})
    for component, (dynamic_j, idle_j) in sorted(totals.items()):
        planned.add(JOB_ENERGY_TOTALS, {"job_id": job_id, "node": part.node,
                                        "component": component,
                                        "source": part.sources.get(component, part.source),
                                        "dynamic_j": dynamic_j, "idle_j": idle_j})
    _plan_units(planned, part, totals_ms)
    return planned


def _plan_units(planned: _Planned, part: ImportedNode, totals_ms: int | None) -> None:
    points: dict[tuple[int, str], float] = {}
    spread = {unit for _t, unit, _n in part.unit_series}
    at_end = [(part.ended_s, u, n) for u, n in part.units.items() if u not in spread]
    for t_end_s, unit, count in (*part.unit_series, *at_end):
        if count:
            slot = (_ms(t_end_s), unit)
            points[slot] = points.get(slot, 0.0) + float(count)
    settled: dict[str, float] = {}
    for (end_ms, unit), count in sorted(points.items()):
        planned.add(JOB_UNITS, {"job_id": planned.job_id, "node": planned.node,
                                "t_end_ms": end_ms, "unit": unit, "count": count})
        if totals_ms is not None and end_ms <= totals_ms:
            settled[unit] = settled.get(unit, 0.0) + count
    for unit, count in sorted(settled.items()):
        planned.add(JOB_UNIT_TOTALS, {"job_id": planned.job_id, "node": planned.node,
                                      "unit": unit, "count": count})


def _write_rows(connection: Connection, planned: _Planned) -> None:
    tables = {t.name: t for t, _c in (*_PART_TABLES, *_NODE_TABLES)}
    for name in ("job_nodes", "tick_energy", "minute_energy", "job_energy",
                 "job_minute_energy", "job_units", "job_energy_totals", "job_unit_totals"):
        rows = planned.rows.get(name)
        if rows:
            connection.execute(tables[name].insert(), rows)
