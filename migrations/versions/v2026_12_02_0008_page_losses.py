"""Each evaluation's losses per page (`pages`: own pages before and after, held-out pages before and
after): the proof of training's page test (scoring/page_test.py) reads them, replay re-derives it,
and the API shows them. Rows committed before carry none.

Revision ID: 20261202_0008
Revises: 20261202_0007
Create Date: 2026-12-02 06:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261202_0008"
down_revision: str | None = "20261202_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("pages", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("pages")
