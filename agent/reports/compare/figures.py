"""Stored jobs -> :class:`~joulestat.reports.compare.table.JobFigures`, for :func:`compare`.

Jobs are read in bulk, as the job lists read them: :func:`figures_for` reads the jobs'
totals (:func:`joulestat.store.jobs.job_totals`, energy and units per node) and
:func:`totals_figures` their nodes' sources and accelerators, their served latency and
their energy bounds, each in one statement for every job (per batch of
:data:`BATCH` jobs), so ``joulestat compare`` over a fleet's thousands of jobs costs a
few statements, not a detail read per job (about 10 ms each: 31.6 s for 3,000 jobs,
issue 28). A job's energy series is read only where live intensity prices it (an
Electricity Maps token: :attr:`joulestat.carbon.pricing.Pricer.live`), and then per job,
as its price depends on when the energy was used. The Compare page calls
:func:`totals_figures` on the totals it reads, so the page and the command build figures
in one place. Each job's CO2e and cost come from :class:`joulestat.carbon.pricing.Pricer`,
the pricing the dashboard's pages use too: so ``joulestat compare`` and the Compare page
print the same figures, with the same unknowns. :func:`job_figures` is the one place a
job record and its price become a :class:`JobFigures`. A running job is counted up to
``now_s`` (energy, units and held time so far), which keeps its ratios consistent while
it runs. Each job is labelled with its accelerators (:func:`accelerator_names`): the
models its nodes' agents registered (``node_devices``), else what the catalog says the
instance type carries, so a row reads "1 x AWS Inferentia2" whether measured or imported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from joulestat.carbon.catalog import accelerators_of
from joulestat.carbon.footprint import CarbonSettings, energy_points
from joulestat.carbon.pricing import JobPrice, Pricer
from joulestat.core.histogram import Histogram, Latency
from joulestat.core.tick import Component
from joulestat.reports.bounds import Bounds, stored_total_bounds
from joulestat.reports.compare.groups import CompareError
from joulestat.reports.compare.latency import job_latency, latency_by_job
from joulestat.reports.compare.table import JobFigures
from joulestat.reports.idle import job_idle_policy
from joulestat.reports.serving_figures import job_analyses, job_steady
from joulestat.reports.steady_state import ServingAnalysis
from joulestat.store.job_refs import JobRefError, resolve_job
from joulestat.store.jobs import (
    JobDetail,
    JobFilter,
    JobRef,
    JobTotals,
    UnknownJobError,
    job_node_latency,
    job_refs,
    job_totals,
)
from joulestat.store.nodes import node_accelerators
from joulestat.store.provenance import node_sources
from joulestat.store.series import job_energy_series

BATCH = 5_000
"""Jobs read per batch: each read names every job's id (``IN (...)``, twice in some
statements), and SQLite takes at most 32,766 parameters per statement, PostgreSQL
65,535; a fleet's hundreds of thousands of jobs are read a few batches at a time."""


@dataclass(frozen=True, slots=True)
class PickedJobs:
    """The jobs to compare, in order, and what resolving the user's references has to
    say (a name that won over another job's id prefix...), for stderr."""

    refs: list[JobRef]
    notes: list[str]


def pick_jobs(engine: Engine, kind: str | None = None,
              jobs: Sequence[str] | None = None) -> PickedJobs:
    """Every job (of ``kind``) by start time, or the ``jobs`` named, in the order given.

    Each reference resolves as everywhere (:func:`joulestat.store.job_refs.resolve_job`: exact
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
    "1 x Tesla T4", else the catalog's for its type ("1 x NVIDIA T4", "none"); "none"
    for a type the catalog does not know whose agent registered no accelerator (a VM,
    a laptop: it looked and found none), "unknown" only where nobody can say."""
    names: dict[str, None] = {}
    for node, instance_type in nodes:
        found = models.get(node)
        catalog = accelerators_of(instance_type)
        if found:
            names.update(dict.fromkeys(f"{n} x {m}" for m, n in sorted(found.items())))
        elif found is not None and catalog == "unknown":
            names["none"] = None
        else:
            names[catalog] = None
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
                bounds: Bounds | None = None,
                latency: Mapping[Latency, Histogram] | None = None,
                serving: ServingAnalysis | None = None) -> JobFigures:
    """The job as :func:`~joulestat.reports.compare.table.compare` takes it: energy is the job's
    attributed energy (and its part above idle), CO2e operational with embodied apart, cost
    and held time per node (``price``, from :meth:`Pricer.job`), ``duration_s`` its
    wall-clock time to ``now_s`` while it runs, ``sources`` its nodes'
    (:func:`node_sources`), ``models`` their accelerators (:func:`node_accelerators`;
    None: the catalog's); its idle policy is the one the agent recorded for it
    (:func:`joulestat.reports.idle.job_idle_policy`); ``bounds`` its energy's in total
    (:func:`joulestat.reports.bounds.total_bounds`; None: unknown); ``latency`` its
    served latency histograms (:func:`~joulestat.reports.compare.latency.latency_by_job`;
    None: a detail's own, as totals carry none); ``serving`` its serving trace's
    analysis (:func:`~joulestat.reports.serving_figures.job_analyses`; None: not traced)."""
    if latency is None:
        latency = job_latency(job.per_node) if isinstance(job, JobDetail) else {}
    return JobFigures(
        job_id=job.id, name=job.name, kind=job.kind, nodes=price.nodes,
        units=dict(job.units), duration_s=job.held_s(now_s), energy_j=job.total_j,
        operational_co2e_g=price.operational_g, embodied_co2e_g=price.embodied_g,
        cost_usd=price.cost_usd, notes=price.notes, labels=dict(job.labels),
        started_s=job.started_s, sources=tuple(sorted(set(sources))),
        accelerator_j=accelerator_j_of(job),
        accelerators=accelerator_names(job.nodes, models or {}),
        dynamic_j=dynamic_j_of(job), idle_policy=job_idle_policy(job),
        latency=dict(latency),
        energy_bounds_j=None if bounds is None else (bounds.low, bounds.high),
        steady=job_steady(serving), traced=serving is not None)


def sources_of(job: JobTotals | JobDetail, by_node: Mapping[str, Sequence[str]]
               ) -> list[str]:
    """The sources of the nodes a job ran on, from :func:`node_sources`' answer."""
    return [s for node, _itype in job.nodes for s in by_node.get(node, ())]


def series_of(engine: Engine, job: JobTotals | JobDetail
              ) -> Callable[[], list[tuple[float, str, float]]]:
    """The job's ``(t_end_s, node, energy_j)`` points, read when called: what
    :meth:`Pricer.job` prices under live intensity, and only then calls for (a read per
    node of the job, where the static rates need none)."""

    def points() -> list[tuple[float, str, float]]:
        return [point for part in job.per_node
                for point in energy_points(part.node,
                                           job_energy_series(engine, job.id, part.node))]

    return points


def totals_figures(engine: Engine, jobs: Sequence[JobTotals], pricer: Pricer,
                   now_s: float) -> list[JobFigures]:
    """``jobs`` (:func:`~joulestat.store.jobs.job_totals`' records) as ``compare()``
    takes them, in their order, priced by ``pricer``: their nodes' sources
    (:func:`node_sources`) and accelerators (:func:`node_accelerators`), their served
    latency (:func:`~joulestat.store.jobs.job_node_latency`) and their energy bounds
    (:func:`~joulestat.reports.bounds.stored_total_bounds`) each read once for all of them
    (per :data:`BATCH` jobs: a statement names each id), so the reads do not grow with
    the number of jobs; the energy series per job only where
    ``pricer`` prices with live intensity. What ``joulestat compare`` and the Compare
    page both build their rows from."""
    ids = [job.id for job in jobs]
    nodes = {node for job in jobs for node, _itype in job.nodes}
    sources = node_sources(engine, nodes)
    models = node_accelerators(engine, nodes)
    served: dict[str, dict[Latency, Histogram]] = {}
    bounds: dict[str, Bounds | None] = {}
    analyses: dict[str, ServingAnalysis] = {}
    for start in range(0, len(ids), BATCH):  # a page's "All time" of a fleet: 10^5 jobs
        batch = ids[start:start + BATCH]
        served.update(latency_by_job(job_node_latency(engine, batch)))
        bounds.update(stored_total_bounds(engine, batch))
        analyses.update(job_analyses(engine, batch))
    return [job_figures(job, pricer.job(job.per_node, now_s, series_of(engine, job)), now_s,
                        sources_of(job, sources), models, bounds.get(job.id),
                        served.get(job.id, {}), analyses.get(job.id))
            for job in jobs]


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
    :class:`~joulestat.reports.compare.groups.CompareError`). ``settings`` overrides intensity,
    PUE, price or asks for live intensity (:class:`~joulestat.carbon.footprint.CarbonSettings`).
    """
    if jobs is None:
        return figures_of_kind(engine, kind, settings, now_s=now_s)
    return figures_for(engine, pick_jobs(engine, kind, jobs).refs, settings, now_s=now_s)


def figures_of_kind(engine: Engine, kind: str | None = None,
                    settings: CarbonSettings | None = None, *, now_s: float | None = None
                    ) -> list[JobFigures]:
    """Figures of every stored job (of ``kind``), by start time: what ``joulestat
    compare`` reads when no job is named. The jobs are chosen in SQL, as the Compare page
    chooses them, instead of named by id a batch at a time: over a fleet's 52,000 jobs
    (issue 28) that is 11 s instead of 16."""
    now = time.time() if now_s is None else float(now_s)
    return totals_figures(engine, job_totals(engine, JobFilter(kind=kind)), Pricer(settings),
                          now)


def figures_for(engine: Engine, refs: Sequence[JobRef], settings: CarbonSettings | None = None,
                *, now_s: float | None = None) -> list[JobFigures]:
    """Figures of ``refs`` (from :func:`pick_jobs`), in their order, priced alike: a few
    statements per :data:`BATCH` jobs (their totals, then :func:`totals_figures`), the
    energy series per job only under live intensity. A job deleted since it was picked
    raises :class:`~joulestat.store.jobs.UnknownJobError`."""
    now = time.time() if now_s is None else float(now_s)
    pricer = Pricer(settings)
    figures: list[JobFigures] = []
    for start in range(0, len(refs), BATCH):
        batch = refs[start:start + BATCH]
        found = {job.id: job for job in job_totals(
            engine, JobFilter(job_ids=tuple(dict.fromkeys(ref.id for ref in batch))))}
        missing = [ref.id for ref in batch if ref.id not in found]
        if missing:
            raise UnknownJobError(f"no job with id {missing[0]!r} in the store")
        figures += totals_figures(engine, [found[ref.id] for ref in batch], pricer, now)
    return figures
