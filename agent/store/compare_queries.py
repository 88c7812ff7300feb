"""Reads for ``joulestat compare``: which stored jobs a comparison is about.

The figures themselves come from :func:`agent.store.job_queries.job_detail` and
:func:`~agent.store.job_queries.job_energy_series` (the one place that knows how raw
rows and minute rollups add up); this module only picks the jobs by kind, in SQL so a
store with many jobs is not read whole; the jobs a user typed (ids, id prefixes,
names) are resolved by :mod:`agent.store.job_refs`.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine

from agent.store.job_refs import JobRef
from agent.store.tables import JOBS

__all__ = ["JobRef", "job_refs"]


def job_refs(engine: Engine, kind: str | None = None) -> list[JobRef]:
    """Jobs by start time (then id): all, or those of ``kind``. (Jobs a user named are
    resolved by :func:`agent.store.job_refs.resolve_job`.)"""
    jobs = JOBS.c
    query = select(jobs.id, jobs.name, jobs.kind, jobs.status, jobs.created_s).order_by(
        jobs.created_s, jobs.id)
    if kind is not None:
        query = query.where(jobs.kind == kind)
    with engine.connect() as connection:
        return [JobRef(str(i), str(n), str(k), str(s), float(c))
                for i, n, k, s, c in connection.execute(query)]
