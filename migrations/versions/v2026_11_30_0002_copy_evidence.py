"""Copy evidence: the validator's first sight of each submission, and per copy pair the residual
similarity, the window's baseline overlap and whether the upload order was clear (issue 12).

Revision ID: 20261130_0002
Revises: 20261129_0001
Create Date: 2026-11-30 15:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261130_0002"
down_revision: str | None = "20261129_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("first_seen", sa.Double(), nullable=True))
        batch.add_column(sa.Column("seen_resolution_s", sa.Double(), nullable=True))
    with op.batch_alter_table("copy_pairs") as batch:
        batch.add_column(sa.Column("similarity", sa.Double(), server_default=sa.text("1.0"), nullable=False))
        batch.add_column(sa.Column("baseline", sa.Double(), server_default=sa.text("0.0"), nullable=False))
        batch.add_column(sa.Column("clear", sa.Boolean(), server_default=sa.true(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("copy_pairs") as batch:
        batch.drop_column("clear")
        batch.drop_column("baseline")
        batch.drop_column("similarity")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("seen_resolution_s")
        batch.drop_column("first_seen")
