"""Each valid submission's update norm and inflation (its median per-parameter norm ÷ the window's
clip reference): an update above `max_inflation` is not aggregated (scoring/selection.py), and the
API shows why. Rows committed before carry none.

Revision ID: 20261201_0005
Revises: 20261130_0004
Create Date: 2026-12-01 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261201_0005"
down_revision: str | None = "20261130_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("norm", sa.Double(), nullable=True))
        batch.add_column(sa.Column("inflation", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("inflation")
        batch.drop_column("norm")
