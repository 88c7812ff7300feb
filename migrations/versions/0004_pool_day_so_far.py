"""The day not over is summed too, up to its settle line (issue 45).

A fleet's comparison by setup reads a node's summed days of ended jobs as their sums
(``job_pool_days``, ``job_pool_sums``, ``job_pool_sources``) and every other job one by
one. A day was summed only once it was over and settled, so late in a UTC day that day's
ended jobs were half of what a comparison read job by job (48,000 of 98,000 parts over
1,000 nodes at 23:30, and ``joulestat compare`` took 4.9 s instead of 1.6 after
midnight). The maintain pass now sums the day so far, up to the node's totals boundary
less 5 minutes, and again whenever more of its jobs have ended:
``job_pool_days.summed_until_s`` says up to when (NULL: the whole day, as before).

The triggers that take a summed day out of use when one of its jobs changes now leave
such a day alone for a job that ended after its ``summed_until_s`` (not one of its
members): otherwise each job ending in the day, and each pass moving its totals, would
send the whole day back to being read job by job. A job that ends at or before it (a
late write), one of its members changing, and every change to a whole day's jobs still
take the day out of use, as before.

Upgrade adds the nullable column (a catalog change, instant on both backends; existing
rows are whole days, NULL) and replaces the triggers' bodies: on PostgreSQL the
functions the triggers call, on SQLite the triggers. Downgrade deletes the days summed
only so far (with their sums: the code before reads every summed day as whole), puts the
baseline's bodies back and drops the column.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As revision 0001: per table, the events and the job id of the changed row.
POOL_TRIGGERS = (
    ("jobs", "AFTER UPDATE", "NEW.id"),
    ("job_nodes", "AFTER INSERT", "NEW.job_id"),
    ("job_nodes", "AFTER UPDATE", "NEW.job_id"),
    ("job_nodes", "BEFORE DELETE", "OLD.job_id"),
    ("job_energy_totals", "AFTER INSERT", "NEW.job_id"),
    ("job_energy_totals", "AFTER UPDATE", "NEW.job_id"),
    ("job_energy_totals", "AFTER DELETE", "OLD.job_id"),
    ("job_unit_totals", "AFTER INSERT", "NEW.job_id"),
    ("job_unit_totals", "AFTER UPDATE", "NEW.job_id"),
    ("job_unit_totals", "AFTER DELETE", "OLD.job_id"),
)
DAY_S = 86_400


def _unsum(table: str, job_id: str, day: str, so_far: bool) -> str:
    """A trigger's body on ``table``: delete the summed days of the job ``job_id``'s
    parts (``day``: the SQL of a UTC day from an epoch-seconds expression), and on
    ``jobs`` also the day it ended in before; with ``so_far``, not a day summed only up
    to before the job's end (revision 0001's bodies without)."""
    spare = ""
    if so_far:
        spare = (" AND (summed_until_s IS NULL OR summed_until_s >= "
                 f"(SELECT ended_s FROM jobs WHERE id = {job_id}))")
    body = (f"DELETE FROM job_pool_days WHERE (node, day_s) IN (SELECT p.node, "
            f"{day.format('j.ended_s')} FROM job_nodes p JOIN jobs j ON j.id = p.job_id "
            f"WHERE p.job_id = {job_id} AND j.ended_s IS NOT NULL){spare}")
    if table == "jobs":
        body += (f"; DELETE FROM job_pool_days WHERE day_s = {day.format('OLD.ended_s')} "
                 "AND node IN (SELECT node FROM job_nodes WHERE job_id = OLD.id)")
        if so_far:
            body += " AND (summed_until_s IS NULL OR summed_until_s >= OLD.ended_s)"
    return body


def _replace_triggers(so_far: bool) -> None:
    postgresql = op.get_context().dialect.name == "postgresql"
    day = (f"(floor(({{}}) / {DAY_S}) * {DAY_S})::bigint" if postgresql
           else f"(CAST(({{}}) / {DAY_S} AS INTEGER) * {DAY_S})")
    for table, event, job_id in POOL_TRIGGERS:
        when, what = event.split()
        name = f"tr_{table}_unsum_{what.lower()}"
        body = _unsum(table, job_id, day, so_far)
        if postgresql:  # the trigger calls the function: replacing its body is enough
            back = "OLD" if what == "DELETE" else "NEW"
            op.execute(f"CREATE OR REPLACE FUNCTION {name}_f() RETURNS trigger "
                       f"LANGUAGE plpgsql AS $$ BEGIN {body}; RETURN {back}; END $$")
        else:
            op.execute(f"DROP TRIGGER {name}")
            op.execute(f"CREATE TRIGGER {name} {when} {what} ON {table} "
                       f"FOR EACH ROW BEGIN {body}; END")


def upgrade() -> None:
    op.add_column("job_pool_days", sa.Column("summed_until_s", sa.Double(), nullable=True))
    _replace_triggers(so_far=True)


def downgrade() -> None:
    so_far = "SELECT node, day_s FROM job_pool_days WHERE summed_until_s IS NOT NULL"
    for table in ("job_pool_sums", "job_pool_sources"):
        op.execute(f"DELETE FROM {table} WHERE (node, day_s) IN ({so_far})")
    op.execute("DELETE FROM job_pool_days WHERE summed_until_s IS NOT NULL")
    _replace_triggers(so_far=False)
    op.drop_column("job_pool_days", "summed_until_s")
