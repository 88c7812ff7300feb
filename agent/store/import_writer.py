"""Jobs measured elsewhere, written into the store so they read like measured ones.

An imported job knows, per node, what it used in total (per component, dynamic and
idle), when the node started and ended, and its units of work, but not the tick by
tick profile. Each node part becomes ONE aggregate row per component spanning the
node's time (``t_start_ms`` = start, ``t_end_ms`` = end) in ``job_energy`` and the
same energy in ``tick_energy``, so :func:`~agent.store.job_queries.list_jobs`,
:func:`~agent.store.job_queries.job_detail`, the carbon layer and the reports see
the job, and the conservation check still holds (job rows = node rows). Units go to
``job_units`` at the node's end.

Rows of imports are marked by their device, ``import:<job id>``, and their source
(``import:joulestat``, ``import:codecarbon``, with the original provenance after a
``/``). Re-importing a job part deletes the part's previous imported rows first, so
importing the same file twice changes nothing, and a newer export of the same job
replaces the older one. A part the store already holds as measured data (rows with
other devices) is left alone: importing a report into the store it came from must not
count the job twice. The job row is inserted, or merged into the stored one (labels
key by key, the earliest start) only when that changes it; a placeholder label value
(``[redacted]`` from a report) never overwrites a value the store holds.

Where a node name already exists with a prune boundary (a live node whose old raw
rows have been rolled up), an aggregate ending before the boundary goes to the minute
tables instead, where queries look for rows that old; one ending at or before the
node's totals boundary is added to the job totals too, which job lists read for that
time (see :mod:`agent.store.rollup`).

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

from agent.store.engine import dialect_insert
from agent.store.job_writer import _status_update
from agent.store.tables import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_MINUTE_ENERGY,
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


@dataclass
class ImportResult:
    """What a call wrote: (job id, node) parts, and parts skipped with the reason."""

    written: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _ms(t_s: float) -> int:
    return round(t_s * 1000)


def _check(job: ImportedJob) -> None:
    for part in job.nodes:
        numbers = [part.started_s, part.ended_s, *part.dynamic_j.values(),
                   *part.idle_j.values(), *part.units.values()]
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


def _save_job_row(connection: Connection, job: ImportedJob) -> None:
    """Insert the job, or merge into the stored one (labels, earliest start), writing
    only when something changes, so a repeated import leaves the row as it was."""
    jobs = JOBS.c
    stored = connection.execute(
        select(jobs.name, jobs.kind, jobs.labels, jobs.created_s)
        .where(jobs.id == job.id).with_for_update()).first()
    if stored is None:
        ended = [p.ended_s for p in job.nodes]
        connection.execute(JOBS.insert(), [{
            "id": job.id, "name": job.name, "kind": job.kind,
            "labels": json.dumps(dict(job.labels), sort_keys=True), "origin": job.origin,
            "created_s": float(job.started_s), "ended_s": max(ended) if ended else None,
            "status": "ended",
        }])
        return
    if (stored.name, stored.kind) != (job.name, job.kind):
        raise ImportConflict(f"job {job.id!r} is already in the store as {stored.kind} job "
                             f"{stored.name!r}, not {job.kind} job {job.name!r}")
    labels = json.loads(stored.labels)
    merged = _merged_labels(labels, job)
    created_s = min(float(stored.created_s), float(job.started_s))
    if merged != labels or created_s != stored.created_s:
        connection.execute(update(JOBS).where(jobs.id == job.id).values(
            labels=json.dumps(merged, sort_keys=True), created_s=created_s))


def _write_job(connection: Connection, insert: Any, job: ImportedJob,
               result: ImportResult) -> None:
    _save_job_row(connection, job)
    device = IMPORT_DEVICE_PREFIX + job.id
    for part in sorted(job.nodes, key=lambda p: p.node):
        if _measured_here(connection, job.id, part.node, device):
            result.skipped.append(f"job {job.id!r} on node {part.node!r} is already in the "
                                  "store as measured data: kept, not imported again")
            continue
        boundaries = _ensure_node(connection, insert, part)
        _clear_part(connection, job.id, part.node, device)
        _write_part(connection, job.id, device, part, *boundaries)
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


def _clear_part(connection: Connection, job_id: str, node: str, device: str) -> None:
    """Remove what an earlier import of this part wrote (the part holds nothing else)."""
    for table in (JOB_ENERGY, JOB_MINUTE_ENERGY, JOB_UNITS, JOB_ENERGY_TOTALS,
                  JOB_UNIT_TOTALS):
        connection.execute(delete(table).where(table.c.job_id == job_id,
                                               table.c.node == node))
    for table in (TICK_ENERGY, MINUTE_ENERGY):
        connection.execute(delete(table).where(and_(table.c.node == node,
                                                    table.c.device == device)))


def _write_part(connection: Connection, job_id: str, device: str, part: ImportedNode,
                boundary_ms: int | None, totals_ms: int | None) -> None:
    start_ms, end_ms = _ms(part.started_s), _ms(part.ended_s)
    connection.execute(JOB_NODES.delete().where(JOB_NODES.c.job_id == job_id,
                                                JOB_NODES.c.node == part.node))
    connection.execute(JOB_NODES.insert(), [{
        "job_id": job_id, "node": part.node, "instance_type": part.instance_type,
        "region": part.region, "started_s": float(part.started_s),
        "ended_s": float(part.ended_s), "pids": "[]",
    }])
    components = sorted(set(part.dynamic_j) | set(part.idle_j))
    rolled = boundary_ms is not None and end_ms <= boundary_ms
    minute_start_s = (end_ms - 1) // MINUTE_MS * 60
    node_rows, job_rows, total_rows = [], [], []
    for component in components:
        dynamic_j = float(part.dynamic_j.get(component, 0.0))
        idle_j = float(part.idle_j.get(component, 0.0))
        source = part.sources.get(component, part.source)
        key = {"node": part.node, "component": component, "device": device}
        if rolled:
            node_rows.append({**key, "minute_start_s": minute_start_s,
                              "energy_j": dynamic_j + idle_j,
                              "covered_s": (end_ms - start_ms) / 1000, "source": source})
            job_rows.append({**key, "job_id": job_id, "minute_start_s": minute_start_s,
                             "dynamic_j": dynamic_j, "idle_j": idle_j})
        else:
            node_rows.append({**key, "t_end_ms": end_ms, "t_start_ms": start_ms,
                              "energy_j": dynamic_j + idle_j, "source": source})
            job_rows.append({**key, "job_id": job_id, "t_end_ms": end_ms,
                             "t_start_ms": start_ms, "dynamic_j": dynamic_j,
                             "idle_j": idle_j, "source": source})
        total_rows.append({"job_id": job_id, "node": part.node, "component": component,
                           "dynamic_j": dynamic_j, "idle_j": idle_j})
    settled = totals_ms is not None and end_ms <= totals_ms
    if total_rows and settled:
        connection.execute(JOB_ENERGY_TOTALS.insert(), total_rows)
    if job_rows:
        node_table, job_table = ((MINUTE_ENERGY, JOB_MINUTE_ENERGY) if rolled
                                 else (TICK_ENERGY, JOB_ENERGY))
        connection.execute(node_table.insert(), node_rows)
        connection.execute(job_table.insert(), job_rows)
    units = [{"job_id": job_id, "node": part.node, "t_end_ms": end_ms, "unit": unit,
              "count": float(count)} for unit, count in sorted(part.units.items()) if count]
    if units:
        connection.execute(JOB_UNITS.insert(), units)
        if settled:
            connection.execute(JOB_UNIT_TOTALS.insert(), [
                {key: row[key] for key in ("job_id", "node", "unit", "count")}
                for row in units])
