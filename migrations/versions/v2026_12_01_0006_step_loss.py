"""Each evaluation's held-out loss with the update applied at the probe step, 5 β (`loss_rand_step`):
the share of the update's gain left there, its retention, decides aggregation beside the gain at β
(scoring/selection.py), and the API shows it. Rows committed before carry none.

Revision ID: 20261201_0006
Revises: 20261201_0005
Create Date: 2026-12-01 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261201_0006"
down_revision: str | None = "20261201_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("loss_rand_step", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("loss_rand_step")
