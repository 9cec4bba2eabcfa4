"""Each window remembers whether its archived blobs were pruned. Pruning read every submission
row older than the retention, blobs deleted long ago included, and asked the store about each one,
every window: 256 peers a window came to 50,944 existence checks a window after 240 windows (a HEAD
each on S3), so the aggregate stage slowed for ever. Now a prune reads only windows not yet pruned.

Revision ID: 20261205_0010
Revises: 20261204_0009
Create Date: 2026-12-05 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261205_0010"
down_revision: str | None = "20261204_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("archive_pruned", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.drop_column("archive_pruned")
