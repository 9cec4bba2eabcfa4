"""Each compared peer's residual sketch per window (scoring/persistence.py): the windows after it
compare a peer's residual with its own earlier ones, and replay reads them back.

Revision ID: 20261202_0007
Revises: 20261201_0006
Create Date: 2026-12-02 01:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261202_0007"
down_revision: str | None = "20261201_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "residual_sketches",
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["window"],
            ["windows.window"],
            name=op.f("fk_residual_sketches_window_windows"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_residual_sketches_hotkey_peers")),
        sa.PrimaryKeyConstraint("window", "hotkey", name=op.f("pk_residual_sketches")),
    )


def downgrade() -> None:
    op.drop_table("residual_sketches")
