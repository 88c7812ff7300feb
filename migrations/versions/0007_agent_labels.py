"""Agent labels: what joulestat recorded about how it measured a job, apart from its labels.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

Why (issue 24): ``joulestat run`` wrote ``cpu_source`` (how the job's CPU time was read)
among the job's labels, so reports showed it in their Labels row, the dashboard offered
it among the user's labels and ``compare --by label:`` grouped by it. Adds
``jobs.agent_labels``, a JSON object (text) like ``labels``, ``'{}'`` for every existing
job; the agent records ``cpu_source`` and ``idle_policy`` there from now on
(agent/attribution/agent_labels.py).

Every existing ``cpu_source`` label that ``joulestat run`` wrote (its values were
``process tree``, ``cgroup v2 /…`` and ``cgroup v1 cpuacct /…``) moves out of
``labels`` into ``agent_labels``; a ``cpu_source`` label with any other value was
someone's own label and stays. The idle policy of jobs stored before this revision is
not known: they get none (reports say unknown), rather than a guess.

Downgrade moves ``cpu_source`` back among the labels, unless the labels hold a key of
that name already (a user's, given after the upgrade) or are full (32, the limit that
``joulestat run`` also kept to); the rest of the agent labels (``idle_policy``) have no
place before this revision and go with the column. Rows are rewritten one job at a
time in Python (only jobs that hold the key), the same on SQLite and PostgreSQL.
Written by hand, self-contained: a migration must not change when the agent's code does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = "cpu_source"
MAX_LABELS = 32  # joulestat.attribution.validation.MAX_LABELS when this was written

JOBS = sa.table("jobs", sa.column("id", sa.String()), sa.column("labels", sa.String()),
                sa.column("agent_labels", sa.String()))


def _written_by_run(value: object) -> bool:
    return isinstance(value, str) and (value == "process tree" or value.startswith("cgroup v"))


def _holding(column: sa.ColumnClause) -> Iterator[tuple[str, dict, dict]]:
    """(id, labels, agent labels) of the jobs whose ``column`` names the key: a quoted key
    and a colon cannot occur inside a JSON string value (its quotes are escaped), so the
    LIKE finds the candidates and the JSON decides."""
    rows = op.get_bind().execute(
        sa.select(JOBS.c.id, JOBS.c.labels, JOBS.c.agent_labels)
        .where(column.like(f'%"{KEY}":%'))).all()
    for job_id, labels, agent_labels in rows:
        try:
            yield job_id, json.loads(labels), json.loads(agent_labels)
        except (TypeError, ValueError):
            continue  # not JSON: nothing the agent wrote; left as it is


def _save(changed: list[dict[str, str]]) -> None:
    if changed:
        op.get_bind().execute(
            JOBS.update().where(JOBS.c.id == sa.bindparam("job_id"))
            .values(labels=sa.bindparam("new_labels"),
                    agent_labels=sa.bindparam("new_agent_labels")), changed)


def _row(job_id: str, labels: dict, agent_labels: dict) -> dict[str, str]:
    return {"job_id": job_id, "new_labels": json.dumps(labels, sort_keys=True),
            "new_agent_labels": json.dumps(agent_labels, sort_keys=True)}


def upgrade() -> None:
    op.add_column("jobs", sa.Column("agent_labels", sa.String(), nullable=False,
                                    server_default="{}"))
    # Where the node's writer answers its job API, if an agent: named to a run that
    # missed it (joulestat.store.durability).
    op.add_column("nodes", sa.Column("writer_api_url", sa.String(), nullable=True))
    changed = []
    for job_id, labels, agent_labels in _holding(JOBS.c.labels):
        if isinstance(labels, dict) and _written_by_run(labels.get(KEY)):
            agent_labels[KEY] = labels.pop(KEY)
            changed.append(_row(job_id, labels, agent_labels))
    _save(changed)


def downgrade() -> None:
    changed = []
    for job_id, labels, agent_labels in _holding(JOBS.c.agent_labels):
        if (isinstance(labels, dict) and isinstance(agent_labels, dict)
                and KEY in agent_labels and KEY not in labels and len(labels) < MAX_LABELS):
            labels[KEY] = agent_labels.pop(KEY)
            changed.append(_row(job_id, labels, agent_labels))
    _save(changed)
    # Plain ALTER TABLE (SQLite >= 3.35 drops a column in place): a batch rebuild of
    # jobs would trip the foreign key of job_nodes, which refers to it.
    op.drop_column("jobs", "agent_labels")
    op.drop_column("nodes", "writer_api_url")
