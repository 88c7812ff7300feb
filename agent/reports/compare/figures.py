"""Stored jobs -> :class:`~joulestat.reports.compare.table.JobFigures`, for :func:`compare`.

Each job's energy, units and node times come from the store's reads
(:func:`joulestat.store.jobs.job_detail`; the energy series only where live intensity needs
it), its CO2e and cost from :class:`joulestat.carbon.pricing.Pricer`, the pricing the
dashboard's pages use too: so ``joulestat compare`` and the Compare page print the same
figures, with the same unknowns. :func:`job_figures` is the one place a job record and
its price become a :class:`JobFigures`. A running job is counted up to ``now_s``
(energy, units and held time so far), which keeps its ratios consistent while it runs.
Each job is labelled with its accelerators (:func:`accelerator_names`): the models its
nodes' agents registered (``node_devices``), else what the catalog says the instance
type carries, so a row reads "1 x AWS Inferentia2" whether measured or imported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from joulestat.carbon.catalog import accelerators_of
from joulestat.carbon.footprint import CarbonSettings, energy_points
from joulestat.carbon.pricing import JobPrice, Pricer
from joulestat.core.tick import Component
from joulestat.reports.bounds import EnergyBounds, stored_bounds
from joulestat.reports.compare.latency import job_latency
from joulestat.reports.compare.table import CompareError, JobFigures
from joulestat.reports.idle import job_idle_policy
from joulestat.store.jobs import (
    JobDetail,
    JobRef,
    JobRefError,
    JobTotals,
    job_detail,
    job_refs,
    resolve_job,
)
from joulestat.store.nodes import node_accelerators
from joulestat.store.provenance import node_sources
from joulestat.store.series import job_energy_series


@dataclass(frozen=True, slots=True)
class PickedJobs:
    """The jobs to compare, in order, and what resolving the user's references has to
    say (a name that won over another job's id prefix...), for stderr."""

    refs: list[JobRef]
    notes: list[str]


def pick_jobs(engine: Engine, kind: str | None = None,
              jobs: Sequence[str] | None = None) -> PickedJobs:
    """Every job (of ``kind``) by start time, or the ``jobs`` named, in the order given.

    Each reference resolves as everywhere (:func:`joulestat.store.jobs.resolve_job`: exact
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


def accelerator_names(nodes: Sequence[tuple[str, str]],
                      models: Mapping[str, Mapping[str, int]]) -> tuple[str, ...]:
    """What a job's ``nodes`` ((node, instance type)) compute on, each named once: per
    node the models its agent registered (``models``, :func:`node_accelerators`) as
    "1 x Tesla T4", else the catalog's for its type ("1 x NVIDIA T4", "none", "unknown")."""
    names: dict[str, None] = {}
    for node, instance_type in nodes:
        found = models.get(node)
        if found:
            names.update(dict.fromkeys(f"{n} x {m}" for m, n in sorted(found.items())))
        else:
            names[accelerators_of(instance_type)] = None
    return tuple(names)


def accelerator_j_of(job: JobTotals | JobDetail) -> float:
    """The job's energy on accelerators: a job list's sum, or a detail's split."""
    if isinstance(job, JobTotals):
        return job.accelerator_j
    return job.energy_j(Component.ACCELERATOR)


def dynamic_j_of(job: JobTotals | JobDetail) -> float:
    """The job's energy above idle, all components: a job list's sum, or a detail's."""
    if isinstance(job, JobTotals):
        return job.dynamic_j
    return sum(job.dynamic_j.values())


def job_figures(job: JobTotals | JobDetail, price: JobPrice, now_s: float,
                sources: Sequence[str] = (),
                models: Mapping[str, Mapping[str, int]] | None = None,
                bounds: EnergyBounds | None = None) -> JobFigures:
    """The job as :func:`~joulestat.reports.compare.table.compare` takes it: energy is the job's
    attributed energy (and its part above idle), CO2e operational with embodied apart, cost
    and held time per node (``price``, from :meth:`Pricer.job`), ``duration_s`` its
    wall-clock time to ``now_s`` while it runs, ``sources`` its nodes'
    (:func:`node_sources`), ``models`` their accelerators (:func:`node_accelerators`;
    None: the catalog's); its idle policy is the one the agent recorded for it
    (:func:`joulestat.reports.idle.job_idle_policy`); ``bounds`` its energy's
    (:func:`joulestat.reports.bounds.stored_bounds`; None: unknown)."""
    total = bounds.total if bounds is not None else None
    return JobFigures(
        job_id=job.id, name=job.name, kind=job.kind, nodes=price.nodes,
        units=dict(job.units), duration_s=job.held_s(now_s), energy_j=job.total_j,
        operational_co2e_g=price.operational_g, embodied_co2e_g=price.embodied_g,
        cost_usd=price.cost_usd, notes=price.notes, labels=dict(job.labels),
        started_s=job.started_s, sources=tuple(sorted(set(sources))),
        accelerator_j=accelerator_j_of(job),
        accelerators=accelerator_names(job.nodes, models or {}),
        dynamic_j=dynamic_j_of(job), idle_policy=job_idle_policy(job),
        latency=job_latency(job.per_node) if isinstance(job, JobDetail) else {},
        energy_bounds_j=None if total is None else (total.low, total.high))


def sources_of(job: JobTotals | JobDetail, by_node: Mapping[str, Sequence[str]]
               ) -> list[str]:
    """The sources of the nodes a job ran on, from :func:`node_sources`' answer."""
    return [s for node, _itype in job.nodes for s in by_node.get(node, ())]


def figures_of(engine: Engine, detail: JobDetail, pricer: Pricer, now_s: float,
               bounds: EnergyBounds | None = None) -> JobFigures:
    """One stored job's :class:`JobFigures`, priced by ``pricer``, bounded by ``bounds``
    (read here when not given)."""

    def points() -> list[tuple[float, str, float]]:
        return [point for part in detail.per_node
                for point in energy_points(part.node,
                                           job_energy_series(engine, detail.id, part.node))]

    price = pricer.job(detail.per_node, now_s, points)
    nodes = [p.node for p in detail.per_node]
    sources = node_sources(engine, nodes)
    if bounds is None:
        bounds = stored_bounds(engine, [detail.id])[detail.id]
    return job_figures(detail, price, now_s, sources_of(detail, sources),
                       node_accelerators(engine, nodes), bounds)


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
    :class:`~joulestat.reports.compare.table.CompareError`). ``settings`` overrides intensity,
    PUE, price or asks for live intensity (:class:`~joulestat.carbon.footprint.CarbonSettings`).
    """
    return figures_for(engine, pick_jobs(engine, kind, jobs).refs, settings, now_s=now_s)


def figures_for(engine: Engine, refs: Sequence[JobRef], settings: CarbonSettings | None = None,
                *, now_s: float | None = None) -> list[JobFigures]:
    """Figures of ``refs`` (from :func:`pick_jobs`), in their order, priced alike."""
    now = time.time() if now_s is None else float(now_s)
    pricer = Pricer(settings)
    bounds = stored_bounds(engine, [ref.id for ref in refs])
    return [figures_of(engine, job_detail(engine, ref.id), pricer, now, bounds[ref.id])
            for ref in refs]
