"""Each flagged pair's authorship readings (scoring/authorship.py): the page test on one sender's
assigned pages of the other sender's update, both ways, measured when their payloads differ
(validator/round/cross.py). Rows written before carry none: their pairs were judged on each
sender's own page test.

Revision ID: 20261206_0013
Revises: 20261205_0012
Create Date: 2026-12-06 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261206_0013"
down_revision: str | None = "20261205_0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("copy_pairs") as batch:
        batch.add_column(sa.Column("authorship_a", sa.Double(), nullable=True))
        batch.add_column(sa.Column("authorship_b", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("copy_pairs") as batch:
        batch.drop_column("authorship_b")
        batch.drop_column("authorship_a")
