"""Salvaged windows: a window committed after repeated failures, with the stages that raised
skipped, is marked so that replay says it cannot re-derive it instead of reporting differences.

Revision ID: 20261130_0003
Revises: 20261130_0002
Create Date: 2026-11-30 17:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_0003"
down_revision: str | None = "20261130_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("salvaged", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.drop_column("salvaged")
