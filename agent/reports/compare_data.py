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
from collections.abc import Sequence

from sqlalchemy.engine import Engine

from agent.carbon.footprint import (
    CarbonSettings,
    energy_points,
    footprint,
    placements_from_detail,
)
from agent.reports.compare import CompareError, JobFigures, NodeFigures
from agent.store.compare_queries import JobRef, job_refs
from agent.store.job_queries import JobDetail, job_detail, job_energy_series


def _resolve(refs: list[JobRef], wanted: Sequence[str], kind: str | None) -> list[JobRef]:
    """``wanted`` in the order given; a name stands for every job of that name (by start
    time), an id for its job. A name or id that matches nothing is an error."""
    chosen: dict[str, JobRef] = {}
    for ref_text in wanted:
        by_id = [r for r in refs if r.id == ref_text]
        found = by_id or [r for r in refs if r.name == ref_text]
        if not found:
            of_kind = f" of kind {kind!r}" if kind is not None else ""
            raise CompareError("jobs", f"no job{of_kind} named or with id {ref_text!r} in "
                               "the store")
        for ref in found:
            chosen.setdefault(ref.id, ref)
    return list(chosen.values())


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

    ``kind`` keeps one kind (training, inference, other); ``jobs`` names jobs by name or
    id, in the order wanted (a name repeated over several runs brings every run); with
    neither, every job by start time. ``settings`` overrides intensity, PUE, price or
    asks for live intensity (:class:`~agent.carbon.footprint.CarbonSettings`).
    Raises :class:`~agent.reports.compare.CompareError` (argument ``jobs``) for a name or
    id that matches no job.
    """
    now = time.time() if now_s is None else float(now_s)
    refs = job_refs(engine, kind=kind, names_or_ids=jobs)
    if jobs is not None:
        refs = _resolve(refs, jobs, kind)
    return [figures_of(engine, job_detail(engine, ref.id), settings, now) for ref in refs]
