"""A leader lease in the database. Without Redis the leader lock was held by declaration: two
validators on one database (two hosts sharing a Postgres, each with its own work folder) both set
weights for the same hotkey. Now the lease row decides where no Redis is configured (with Redis,
the Redis lock still does).

Revision ID: 20261205_0011
Revises: 20261205_0010
Create Date: 2026-12-05 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261205_0011"
down_revision: str | None = "20261205_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leader_leases",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leader_leases")
