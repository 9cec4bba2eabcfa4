"""An index on submissions (hotkey, window). A peer's detail reads its own newest windows; the
table's key starts with the window, so that read scanned every window's rows (Postgres, 4,000
windows x 256 peers: a sequential scan of about a million rows, 41.6 ms a request, growing for ever).

Revision ID: 20261205_0012
Revises: 20261205_0011
Create Date: 2026-12-05 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "20261205_0012"
down_revision: str | None = "20261205_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_submissions_hotkey_window", "submissions", ["hotkey", "window"])


def downgrade() -> None:
    op.drop_index("ix_submissions_hotkey_window", table_name="submissions")
