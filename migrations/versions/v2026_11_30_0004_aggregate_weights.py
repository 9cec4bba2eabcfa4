"""Aggregation weights: each aggregated update's coefficient in the window's outer step, aligned with
`aggregate_digests` (scoring/selection.py). Windows committed before carry none: equal weights.

Revision ID: 20261130_0004
Revises: 20261130_0003
Create Date: 2026-11-30 22:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_0004"
down_revision: str | None = "20261130_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.add_column(sa.Column("aggregate_weights", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("windows") as batch:
        batch.drop_column("aggregate_weights")
