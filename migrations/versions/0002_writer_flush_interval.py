"""The node's writer says how often it flushes (issue 46).

The Overview said "reporting: yes" and showed "power now" minutes after an agent had
stopped: it called a node silent only once its newest tick was 300 s old, whatever the
agent's flush interval. The writer now records that interval beside its lease
(``nodes.writer_flush_interval_s``, seconds), and the Overview calls a node silent once
its newest tick is three intervals old (30 s at the default 10 s), or at once when its
writer gave up the lease.

Upgrade adds the nullable column (a catalog change, instant on both backends); existing
rows keep NULL until their writer next takes the lease (read as the default interval).
Downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("writer_flush_interval_s", sa.Double(), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "writer_flush_interval_s")
