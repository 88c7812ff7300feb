"""A multi-model job's energy, split among its models by the time each kept it busy.

One server process serving several models has one energy figure. What each model cost
comes from what the client recorded (:mod:`joulestat.core.model_units`): per model, its
units (``inference@model-a``) and its busy seconds (``busy_s@model-a``), stored as
``job_units`` rows like any unit, on the tick that took them. Here, per node and
**minute** (the minute of the store's rollups: rows ending in ``(m, m + 60]``)::

    E_model = E_job * busy_model / max(measured_s, sum of busy)      idle = E_job - sum E_model

where ``E_job`` is the job's attributed energy in the minute and ``measured_s`` the time
it was measured there. Models + idle = the job's energy in every minute, and the same
fractions applied to each tick of the minute give models + idle = the job's share on
every tick. Idle is the energy of the moments no model was busy (a server between
requests); concurrent requests may add up to more busy time than wall time, and the
division by their sum then shares the whole among them.

What a model *costs* (``compare --by model``) is its part of the job's whole energy,
idle included (:meth:`ModelSplit.job_fractions`): the server's time between requests is
spent on behalf of the models it serves, so a one-model server's model reads what the
job reads. The busy-time split above is the measure that divides it.

Why minutes rather than ticks: busy time reaches the agent when the client sends it
(about once a second), not when it was spent, so one tick may take two seconds of busy
time and the next none; over a minute those lumps even out, and minutes are what is
left once raw rows are pruned, so one formula serves both. Raw rows after the node's
prune boundary are read per tick (``measured_s``: the sum of the job's tick durations
in the minute), minute rollups before it (``measured_s``: the node's covered seconds
in the minute, within the job's time on the node), by :mod:`joulestat.store.schema`'s
rule, so each tick counts once.

:func:`ordinary_units` is the one filter that keeps the per-model keys out of every
listing of a job's units (totals, unit choices, series).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, Double, Select, and_, func, literal_column, select, union
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from joulestat.core.model_units import BUSY, SEPARATOR, split_key
from joulestat.store.read_rule import every_unit_row, raw_side, rolled_side, settled_until_ms
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    MINUTE_ENERGY,
    MINUTE_MS,
    MINUTE_S,
    NODES,
    one_of,
)

Key = tuple[str, str, int]  # (job id, node, minute_start_s)


def ordinary_units(unit: Any) -> ColumnElement[bool]:
    """SQL: ``unit`` (a ``job_units.unit`` or ``job_unit_totals.unit`` column) is a plain
    unit, not a per-model key: what every listing of a job's units keeps."""
    return unit.not_like(f"%{SEPARATOR}%")


@dataclass(frozen=True, slots=True)
class ModelShare:
    """One model of a job: its energy, busy seconds and the units it counted."""

    model: str
    energy_j: float
    busy_s: float
    units: dict[str, float]

    def per(self, unit: str) -> float | None:
        """Joules per ``unit`` of this model; None when it counted none."""
        count = self.units.get(unit, 0.0)
        return self.energy_j / count if count > 0 else None


@dataclass(frozen=True, slots=True)
class ModelSplit:
    """A job's energy split among its models: ``energy_j`` = Σ models + ``idle_j``."""

    job_id: str
    energy_j: float
    idle_j: float
    models: tuple[ModelShare, ...]

    def model(self, name: str) -> ModelShare | None:
        return next((m for m in self.models if m.model == name), None)

    def job_fractions(self) -> dict[str, float]:
        """Each model's fraction of the job's WHOLE energy, idle included: its busy-time
        energy over all the models' (so the fractions add up to 1). The job's idle part
        goes to its models as a node's idle power goes to its jobs under ``--idle-policy
        share``: in proportion to what each used. So a one-model server's model carries
        the job's energy, and two models' energies add up to the job's. Models that were
        never busy (no busy time recorded) share it evenly."""
        if not self.models:
            return {}
        busy_j = sum(m.energy_j for m in self.models)
        if busy_j <= 0:
            return {m.model: 1.0 / len(self.models) for m in self.models}
        return {m.model: m.energy_j / busy_j for m in self.models}


@dataclass(frozen=True, slots=True)
class SplitRow:
    """A tick (``rolled`` False) or a rolled-up minute of a job on a node, split."""

    node: str
    t_end_s: float
    rolled: bool
    energy_j: float
    models: dict[str, float]
    idle_j: float


@dataclass
class _Window:
    """One job's minute on one node: energy, measured time, busy time and units."""

    energy_j: float = 0.0
    measured_s: float = 0.0
    busy: dict[str, float] = field(default_factory=dict)
    counts: dict[str, dict[str, float]] = field(default_factory=dict)

    def fractions(self) -> dict[str, float]:
        """Each model's part of the window's energy (summing to at most 1)."""
        cap = max(self.measured_s, sum(self.busy.values()))
        return {m: (b / cap if cap > 0 else 0.0) for m, b in self.busy.items()}


def split_energy(energy_j: float, measured_s: float, busy: Mapping[str, float]
                 ) -> tuple[dict[str, float], float]:
    """(joules per model, idle joules) of ``energy_j`` measured over ``measured_s`` with
    these busy seconds per model: the formula of this module, for one window."""
    window = _Window(energy_j, measured_s, dict(busy))
    models = {m: energy_j * f for m, f in window.fractions().items()}
    return models, energy_j - sum(models.values())


def _minute(t_end_ms: Any) -> Any:
    """SQL: ``minute_start_s`` of the minute a row ending at ``t_end_ms`` belongs to
    (as :mod:`joulestat.store.maintenance` files it)."""
    return (t_end_ms - literal_column("1")).op("/", return_type=BigInteger, precedence=8)(
        literal_column(str(MINUTE_MS))) * literal_column(str(MINUTE_S))


def _ids(column: Any, job_ids: Sequence[str]) -> ColumnElement[bool]:
    return one_of(column, list(job_ids))


def _tick_energy(job_ids: Sequence[str]) -> Select[Any]:
    """Per raw tick after the boundary: job, node, t_end_ms, joules, duration (s)."""
    rows = JOB_ENERGY.c
    query = (select(rows.job_id, rows.node, rows.t_end_ms,
                    func.sum(rows.dynamic_j + rows.idle_j).label("energy_j"),
                    func.max(rows.t_end_ms - rows.t_start_ms).label("span_ms"))
             .where(_ids(rows.job_id, job_ids))
             .group_by(rows.job_id, rows.node, rows.t_end_ms))
    return raw_side(query, JOB_ENERGY)


def _windows(connection: Connection, job_ids: Sequence[str]) -> dict[Key, _Window]:
    """Every minute of ``job_ids`` with per-model units, on each node."""
    windows: defaultdict[Key, _Window] = defaultdict(_Window)
    units = every_unit_row().c
    minute = _minute(units.t_end_ms)
    for job_id, node, minute_s, unit, count in connection.execute(
            select(units.job_id, units.node, minute, units.unit, func.sum(units.count))
            .where(_ids(units.job_id, job_ids), ~ordinary_units(units.unit))
            .group_by(units.job_id, units.node, minute, units.unit)):
        parsed = split_key(str(unit))
        if parsed is None:
            continue
        base, model = parsed
        window = windows[(job_id, node, int(minute_s))]
        if base == BUSY:
            window.busy[model] = window.busy.get(model, 0.0) + float(count)
        else:
            per_model = window.counts.setdefault(model, {})
            per_model[base] = per_model.get(base, 0.0) + float(count)
    ticks = _tick_energy(job_ids).subquery()
    minute = _minute(ticks.c.t_end_ms)
    for job_id, node, minute_s, energy_j, span_ms in connection.execute(
            select(ticks.c.job_id, ticks.c.node, minute, func.sum(ticks.c.energy_j),
                   func.sum(ticks.c.span_ms))
            .group_by(ticks.c.job_id, ticks.c.node, minute)):
        window = windows[(job_id, node, int(minute_s))]
        window.energy_j += float(energy_j)
        window.measured_s += float(span_ms) / 1000
    for key, energy_j, measured_s in _rolled(connection, job_ids):
        window = windows[key]
        window.energy_j += energy_j
        window.measured_s += measured_s
    return dict(windows)


def _rolled(connection: Connection, job_ids: Sequence[str]
            ) -> list[tuple[Key, float, float]]:
    """(key, joules, measured seconds) of the rolled-up minutes before the boundary:
    the node's covered seconds in the minute, within the job's time on the node."""
    rows, covered = JOB_MINUTE_ENERGY.c, MINUTE_ENERGY.c
    covered_s = (select(func.max(covered.covered_s))
                 .where(covered.node == rows.node, covered.minute_start_s == rows.minute_start_s)
                 .scalar_subquery())
    query = rolled_side(
        select(rows.job_id, rows.node, rows.minute_start_s,
               func.sum(rows.dynamic_j + rows.idle_j),
               func.coalesce(covered_s, literal_column(str(MINUTE_S), Double)))
        .where(_ids(rows.job_id, job_ids))
        .group_by(rows.job_id, rows.node, rows.minute_start_s), JOB_MINUTE_ENERGY)
    found = connection.execute(query).all()
    if not found:
        return []
    parts = JOB_NODES.c
    spans = {(job_id, node): (started_s, ended_s) for job_id, node, started_s, ended_s in
             connection.execute(select(parts.job_id, parts.node, parts.started_s,
                                       parts.ended_s).where(_ids(parts.job_id, job_ids)))}
    result = []
    for job_id, node, minute_s, energy_j, node_covered_s in found:
        started_s, ended_s = spans.get((job_id, node), (None, None))
        start = max(float(minute_s), started_s if started_s is not None else -1e18)
        end = min(float(minute_s) + MINUTE_S, ended_s if ended_s is not None else 1e18)
        present_s = max(0.0, end - start)
        result.append(((job_id, node, int(minute_s)), float(energy_j),
                       min(float(node_covered_s), present_s)))
    return result


def _assemble(job_id: str, windows: Iterable[_Window]) -> ModelSplit:
    energy = idle = 0.0
    per_model: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    counts: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    for window in windows:
        models, rest = split_energy(window.energy_j, window.measured_s, window.busy)
        energy += window.energy_j
        idle += rest
        for model, joules in models.items():
            per_model[model][0] += joules
            per_model[model][1] += window.busy[model]
        for model, units in window.counts.items():
            per_model.setdefault(model, [0.0, 0.0])
            for unit, count in units.items():
                counts[model][unit] += count
    shares = tuple(ModelShare(m, joules, busy_s, dict(sorted(counts[m].items())))
                   for m, (joules, busy_s) in sorted(per_model.items()))
    return ModelSplit(job_id, energy, idle, shares)


def _with_models(connection: Connection, job_ids: Sequence[str]) -> set[str]:
    """Which of ``job_ids`` counted per-model units: from the unit totals and each part's
    few raw rows after them (as :mod:`joulestat.store.jobs` reads), so the Compare page
    by model over ten thousand jobs does not walk every unit row they ever stored."""
    totals, units, parts = JOB_UNIT_TOTALS.c, JOB_UNITS.c, JOB_NODES.c
    settled = select(totals.job_id).where(_ids(totals.job_id, job_ids),
                                          ~ordinary_units(totals.unit))
    recent_parts = (select(parts.job_id, parts.node, settled_until_ms().label("after_ms"))
                    .select_from(JOB_NODES.join(NODES, NODES.c.node == parts.node))
                    .where(_ids(parts.job_id, job_ids))
                    .cte("model_parts").prefix_with("MATERIALIZED"))
    recent = (select(units.job_id)
              .select_from(recent_parts.join(JOB_UNITS, and_(
                  units.job_id == recent_parts.c.job_id, units.node == recent_parts.c.node,
                  units.t_end_ms > recent_parts.c.after_ms)))
              .where(~ordinary_units(units.unit)))
    return {str(job_id) for (job_id,) in connection.execute(union(settled, recent))}


def model_splits(engine: Engine, job_ids: Sequence[str]) -> dict[str, ModelSplit]:
    """The split of each of ``job_ids`` that recorded per-model units (jobs that did
    not are absent): one read of their per-model units, raw ticks and rollups."""
    if not job_ids:
        return {}
    with engine.connect() as connection:
        with_models = sorted(_with_models(connection, job_ids))
        windows = _windows(connection, with_models) if with_models else {}
    by_job: defaultdict[str, list[_Window]] = defaultdict(list)
    for (job_id, _node, _minute_s), window in windows.items():
        by_job[job_id].append(window)
    return {job_id: _assemble(job_id, by_job[job_id]) for job_id in with_models}


def split_rows(engine: Engine, job_id: str) -> list[SplitRow]:
    """Every tick (raw) and rolled-up minute of ``job_id``, split among its models, in
    time order: models + idle = the row's energy, row by row."""
    with engine.connect() as connection:
        windows = _windows(connection, [job_id])
        ticks = connection.execute(_tick_energy([job_id])).all()
        rolled = _rolled(connection, [job_id])
    rows = []
    for _job, node, t_end_ms, energy_j, _span_ms in ticks:
        minute_s = (int(t_end_ms) - 1) // MINUTE_MS * MINUTE_S
        rows.append(_row(node, int(t_end_ms) / 1000, False, float(energy_j),
                         windows.get((job_id, node, minute_s))))
    for (_job, node, minute_s), energy_j, _measured in rolled:
        rows.append(_row(node, float(minute_s + MINUTE_S), True, energy_j,
                         windows.get((job_id, node, minute_s))))
    return sorted(rows, key=lambda r: (r.t_end_s, r.node))


def _row(node: str, t_end_s: float, rolled: bool, energy_j: float,
         window: _Window | None) -> SplitRow:
    fractions = window.fractions() if window is not None else {}
    models = {m: energy_j * f for m, f in fractions.items()}
    return SplitRow(node, t_end_s, rolled, energy_j, models, energy_j - sum(models.values()))
