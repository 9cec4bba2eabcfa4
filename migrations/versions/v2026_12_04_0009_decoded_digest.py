"""Each submission's decoded digest (scoring/decoded_digest.py): the digest of its decoded values,
which every re-encoding of one update shares (a doubled codebook with halved scales, swapped codebook
entries, an unused entry changed). Replay detection compares it with earlier windows' as well as the
payload digest. Rows committed before carry none.

Revision ID: 20261204_0009
Revises: 20261202_0008
Create Date: 2026-12-04 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261204_0009"
down_revision: str | None = "20261202_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("decoded_digest", sa.String(length=128), nullable=True))
    op.create_index(op.f("ix_submissions_decoded_digest"), "submissions", ["decoded_digest"])


def downgrade() -> None:
    op.drop_index(op.f("ix_submissions_decoded_digest"), table_name="submissions")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("decoded_digest")
