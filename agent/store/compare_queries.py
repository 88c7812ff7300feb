"""Reads for ``joulestat compare``: which stored jobs a comparison is about.

The figures themselves come from :func:`agent.store.job_queries.job_detail` and
:func:`~agent.store.job_queries.job_energy_series` (the one place that knows how raw
rows and minute rollups add up); this module only picks the jobs, by kind and by the
names or ids a user typed, in SQL so a store with many jobs is not read whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.engine import Engine

from agent.store.tables import JOBS


@dataclass(frozen=True, slots=True)
class JobRef:
    """A stored job's identity: enough to resolve what a user named."""

    id: str
    name: str
    kind: str
    status: str
    started_s: float


def job_refs(
    engine: Engine, kind: str | None = None, names_or_ids: Sequence[str] | None = None
) -> list[JobRef]:
    """Jobs by start time (then id): all, or those of ``kind``, or those whose id or name
    is one of ``names_or_ids`` (both filters when both are given)."""
    jobs = JOBS.c
    query = select(jobs.id, jobs.name, jobs.kind, jobs.status, jobs.created_s).order_by(
        jobs.created_s, jobs.id)
    if kind is not None:
        query = query.where(jobs.kind == kind)
    if names_or_ids is not None:
        wanted = sorted(set(names_or_ids))
        query = query.where(or_(jobs.id.in_(wanted), jobs.name.in_(wanted)))
    with engine.connect() as connection:
        return [JobRef(str(i), str(n), str(k), str(s), float(c))
                for i, n, k, s, c in connection.execute(query)]
