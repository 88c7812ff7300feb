"""The component ``gpu`` is ``accelerator``: every vendor's accelerator, one name.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

Why: since AMD, Gaudi and Neuron sensors report the same component as NVIDIA, "gpu"
named an Inferentia or a Gaudi wrongly (issue 14). Rows are renamed in place, in every
table with a ``component`` column: ``node_devices``, ``tick_energy``, ``minute_energy``,
``job_energy``, ``job_minute_energy`` and ``job_energy_totals``. Device names (``gpu0``,
``amdgpu0``, ``neuron0``) name hardware and stay. Only names change: every figure, and
so every total a report computes, is the same before and after.

On PostgreSQL ``tick_energy`` and ``job_energy`` are partitioned by ``t_end_ms``
(revision 0005); an UPDATE through the parent that leaves the partition key alone
stays in each row's partition. ``component`` is in each table's primary key, so a key
held under both names (rows written under the new name into a store downgraded from
here, then upgraded again) is merged first: energies, covered seconds and job shares
are summed into the row under the new name (the two were written by different ticks),
a device's description under the new name wins, and the old row goes. A store that
never held both names (every store an agent wrote: before this revision every
accelerator was ``gpu``) only has its rows renamed.

The crash checkpoints in ``node_checkpoints.state`` (JSON) name components too: the
sampler's series (``sampler.last_j``), the replay sensor's energies
(``sampler.sensors.replay.energy_j``) and the learned idle powers
(``accounting.idle``). They are rewritten as well, so an agent restarted after the
upgrade, or after a downgrade, continues its series through the gap. (The agent also
maps ``gpu`` when it reads an old checkpoint, a spool segment or a replay trace.)

Downgrade renames ``accelerator`` back to ``gpu`` everywhere above: before this
revision that was every accelerator's name. SQLite and PostgreSQL alike.
Written by hand, self-contained: a migration must not change when the agent's code does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = "gpu"
NEW = "accelerator"
# table: (its primary key but component, the columns summed when a key has both names)
TABLES = {
    "node_devices": (("node", "device"), ()),
    "tick_energy": (("node", "t_end_ms", "device"), ("energy_j",)),
    "minute_energy": (("node", "minute_start_s", "device"), ("energy_j", "covered_s")),
    "job_energy": (("job_id", "node", "t_end_ms", "device"), ("dynamic_j", "idle_j")),
    "job_minute_energy": (("job_id", "node", "minute_start_s", "device"),
                          ("dynamic_j", "idle_j")),
    "job_energy_totals": (("job_id", "node"), ("dynamic_j", "idle_j")),
}
# Where a checkpoint lists [component, ...] rows: a path of keys to each list.
CHECKPOINT_LISTS = (("sampler", "last_j"), ("sampler", "sensors", "replay", "energy_j"),
                    ("accounting", "idle"))


def _rename_rows(old: str, new: str) -> None:
    """Merge keys held under both names into the ``new`` row, then rename the rest."""
    bind = op.get_bind()
    names = {"old": old, "new": new}
    for table, (keys, summed) in TABLES.items():
        twin = " AND ".join([f"o.{k} = {table}.{k}" for k in keys] + ["o.component = :old"])
        clash = f"SELECT 1 FROM {table} AS o WHERE {twin}"
        if bind.execute(sa.text(f"SELECT 1 FROM {table} WHERE component = :new AND "
                                f"EXISTS ({clash}) LIMIT 1"), names).first() is not None:
            if summed:
                sums = ", ".join(f"{c} = {c} + (SELECT o.{c} FROM {table} AS o WHERE {twin})"
                                 for c in summed)
                bind.execute(sa.text(f"UPDATE {table} SET {sums} WHERE component = :new AND "
                                     f"EXISTS ({clash})"), names)
            mine = " AND ".join([f"n.{k} = {table}.{k}" for k in keys]
                                + ["n.component = :new"])
            bind.execute(sa.text(f"DELETE FROM {table} WHERE component = :old AND EXISTS "
                                 f"(SELECT 1 FROM {table} AS n WHERE {mine})"), names)
        bind.execute(sa.text(f"UPDATE {table} SET component = :new WHERE component = :old"),
                     names)


def _renamed_state(state: Any, old: str, new: str) -> bool:
    """Rename ``old`` to ``new`` in the checkpoint's component lists, in place; whether
    anything changed. Anything not of the expected shape is left as it is: the agent
    skips what it cannot read in a checkpoint."""
    changed = False
    for path in CHECKPOINT_LISTS:
        found = state
        for key in path:
            found = found.get(key) if isinstance(found, dict) else None
        for row in found if isinstance(found, list) else ():
            if isinstance(row, list) and row and row[0] == old:
                row[0] = new
                changed = True
    return changed


def _rename_checkpoints(old: str, new: str) -> None:
    bind = op.get_bind()
    checkpoints = sa.table("node_checkpoints", sa.column("node", sa.String()),
                           sa.column("state", sa.String()))
    rows = bind.execute(sa.select(checkpoints.c.node, checkpoints.c.state)).all()
    for node, text in rows:
        try:
            state = json.loads(text)
        except (TypeError, ValueError):
            continue  # unreadable already: the agent ignores it
        if _renamed_state(state, old, new):
            bind.execute(checkpoints.update().where(checkpoints.c.node == node)
                         .values(state=json.dumps(state)))


def upgrade() -> None:
    _rename_rows(OLD, NEW)
    _rename_checkpoints(OLD, NEW)


def downgrade() -> None:
    _rename_rows(NEW, OLD)
    _rename_checkpoints(NEW, OLD)
