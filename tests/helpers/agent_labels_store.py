"""Agent labels in the store on any database: kept apart from labels, merged by nodes
(two idle policies make ``mixed``), and migration 0007 moving ``cpu_source`` out of the
labels and back.

The scenarios (tests/store/test_agent_labels.py) start from an empty database, on SQLite
and on PostgreSQL. Jobs are written through the agent's own
writer (at the head) or as the writer before 0007 wrote them (:func:`~tests.helpers.
store_jobs.save_jobs_before_0007`); everything is read back through the store's reads.
"""

from __future__ import annotations

import json

from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.core.records import JobRecord
from joulestat.store.jobs import job_detail, job_totals, list_jobs
from tests.helpers.store_jobs import (
    T0,
)

RUN_CGROUP = "cgroup v2 /user.slice/joulestat-job-by-run"


def job(job_id: str, labels: dict[str, str], agent_labels: dict[str, str] | None = None,
        ended_s: float | None = None) -> JobRecord:
    return JobRecord(id=job_id, name=f"name-{job_id}", kind="training", labels=dict(labels),
                     pids=frozenset({100}), started_s=T0, origin="run", ended_s=ended_s,
                     agent_labels=dict(agent_labels or {}))


def apart(engine: Engine) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """(labels, agent labels) per job, as every read of the store gives them (they agree)."""
    listed = {s.id: (s.labels, s.agent_labels) for s in list_jobs(engine)}
    totals = {t.id: (t.labels, t.agent_labels) for t in job_totals(engine)}
    details = {i: (d.labels, d.agent_labels)
               for i in listed for d in [job_detail(engine, i)]}
    assert listed == totals == details
    return listed


def raw_labels(engine: Engine) -> dict[str, dict[str, str]]:
    """Labels per job with plain SQL, at any revision."""
    with engine.connect() as connection:
        return {i: json.loads(labels) for i, labels in connection.execute(
            text("SELECT id, labels FROM jobs"))}
