"""Stored jobs -> :class:`~agent.reports.compare.JobFigures`, for :func:`compare`.

Each job's energy, units and node times come from the store's public reads
(:func:`~agent.store.job_queries.job_detail`, :func:`~agent.store.job_queries.
job_energy_series`), its CO2e and cost from :func:`agent.carbon.footprint.footprint`,
per node: so ``joulestat compare`` prints the same figures ``footprint()`` gives any
other report, with the same unknowns. A running job is counted up to ``now_s`` (energy,
units and held time so far), which keeps its ratios consistent while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from agent.carbon.catalog import price_per_hour
from agent.carbon.footprint import (
    CarbonSettings,
    energy_points,
    footprint,
    placements_from_detail,
)
from agent.reports.compare import CompareError, JobFigures, NodeFigures
from agent.store.compare_queries import job_refs
from agent.store.job_queries import JobDetail, job_detail, job_energy_series
from agent.store.job_refs import JobRef, JobRefError, resolve_job
from agent.store.report_queries import node_sources


@dataclass(frozen=True, slots=True)
class PickedJobs:
    """The jobs to compare, in order, and what resolving the user's references has to
    say (a name that won over another job's id prefix...), for stderr."""

    refs: list[JobRef]
    notes: list[str]


def pick_jobs(engine: Engine, kind: str | None = None,
              jobs: Sequence[str] | None = None) -> PickedJobs:
    """Every job (of ``kind``) by start time, or the ``jobs`` named, in the order given.

    Each reference resolves as everywhere (:func:`agent.store.job_refs.resolve_job`: exact
    id, else name, else unique id prefix), except that a name brings every run of that
    name, by start time: comparing runs is what compare is for. A job named twice comes
    once. Raises :class:`CompareError` (argument ``jobs``) for a reference that matches
    nothing (close names suggested) or a prefix of several ids (they are listed).
    """
    if jobs is None:
        return PickedJobs(job_refs(engine, kind=kind), [])
    chosen: dict[str, JobRef] = {}
    notes: list[str] = []
    for ref_text in jobs:
        try:
            found = resolve_job(engine, ref_text, kind)
        except JobRefError as exc:
            raise CompareError("jobs", str(exc)) from None
        notes += found.shadow_notes()
        for ref in found.jobs:
            chosen.setdefault(ref.id, ref)
    return PickedJobs(list(chosen.values()), notes)


def pick_baseline(engine: Engine, baseline: str, compared: Sequence[JobFigures],
                  kind: str | None = None) -> tuple[str, list[str]]:
    """The id of the job ``baseline`` means among the ``compared`` ones, and the notes
    to print: resolved like any job reference; a name with several compared runs means
    the latest of them (the baseline is one row). Raises :class:`CompareError`
    (argument ``baseline``) when it resolves to no compared job."""
    try:
        found = resolve_job(engine, baseline, kind)
    except JobRefError as exc:
        raise CompareError("baseline", str(exc)) from None
    ids = {f.job_id for f in compared}
    runs = tuple(job for job in found.jobs if job.id in ids)
    if not runs:
        known = ", ".join(sorted({f.name for f in compared})) or "none"
        which = ", ".join(job.id for job in found.jobs[-3:])
        raise CompareError("baseline", f"{baseline!r} ({which}) is none of the compared "
                           f"jobs ({known})")
    chosen = replace(found, jobs=runs)
    return chosen.latest.id, chosen.notes("comparing against")


def figures_of(engine: Engine, detail: JobDetail, settings: CarbonSettings | None,
               now_s: float) -> JobFigures:
    """One stored job's :class:`JobFigures`, its carbon and cost from ``footprint()``."""
    placements = placements_from_detail(detail, now_s)
    points = [point for part in detail.per_node
              for point in energy_points(part.node,
                                         job_energy_series(engine, detail.id, part.node))]
    found = footprint(points, placements, settings, now_s=now_s)
    costs = {n.node: n.cost_usd for n in found.nodes}
    nodes = tuple(
        NodeFigures(part.node, part.instance_type, placements[part.node].duration_s,
                    part.total_j, costs.get(part.node))
        for part in detail.per_node)
    end_s = detail.ended_s if detail.ended_s is not None else now_s
    return JobFigures(
        job_id=detail.id, name=detail.name, kind=detail.kind, nodes=nodes,
        units=dict(detail.units), duration_s=max(0.0, end_s - detail.started_s),
        energy_j=detail.total_j, operational_co2e_g=found.operational_co2e_g,
        embodied_co2e_g=found.embodied_co2e_g, cost_usd=found.cost_usd, notes=found.notes,
        labels=dict(detail.labels), started_s=detail.started_s,
        sources=tuple(sorted({s for found_sources in node_sources(
            engine, [p.node for p in detail.per_node]).values() for s in found_sources})),
    )


def load_job_figures(
    engine: Engine,
    settings: CarbonSettings | None = None,
    kind: str | None = None,
    jobs: Sequence[str] | None = None,
    *,
    now_s: float | None = None,
) -> list[JobFigures]:
    """Figures of the stored jobs to compare.

    ``kind`` keeps one kind (training, inference, other); ``jobs`` names jobs by id,
    unique id prefix or name, in the order wanted (a name brings every run of it); with
    neither, every job by start time (see :func:`pick_jobs`, which also raises its
    :class:`~agent.reports.compare.CompareError`). ``settings`` overrides intensity,
    PUE, price or asks for live intensity (:class:`~agent.carbon.footprint.CarbonSettings`).
    """
    return figures_for(engine, pick_jobs(engine, kind, jobs).refs, settings, now_s=now_s)


def figures_for(engine: Engine, refs: Sequence[JobRef], settings: CarbonSettings | None = None,
                *, now_s: float | None = None) -> list[JobFigures]:
    """Figures of ``refs`` (from :func:`pick_jobs`), in their order."""
    now = time.time() if now_s is None else float(now_s)
    return [figures_of(engine, job_detail(engine, ref.id), settings, now) for ref in refs]


@dataclass(frozen=True, slots=True)
class PriceUsed:
    """The hourly price one instance type was charged, and where that price came from
    (``prices file /path``, ``catalog:<url>``, ``override`` or ``unknown``)."""

    instance_type: str
    usd_per_hour: float | None
    source: str
    note: str


def prices_used(figures: Iterable[JobFigures], settings: CarbonSettings | None = None
                ) -> list[PriceUsed]:
    """Each instance type of ``figures``' nodes (sorted) with the price it was charged.

    Asked of :func:`agent.carbon.catalog.price_per_hour` with the settings that priced the
    figures, the one function ``footprint()`` asks, so the source printed beside a table
    is the source of the table's costs: a reader can tell a negotiated rate from a list
    price.
    """
    settings = settings if settings is not None else CarbonSettings()
    types = sorted({n.instance_type for f in figures for n in f.nodes})
    used = []
    for itype in types:
        price = price_per_hour(itype or None, settings.price_per_hour_usd, settings.prices)
        used.append(PriceUsed(itype, price.usd_per_hour, price.source, price.note))
    return used
