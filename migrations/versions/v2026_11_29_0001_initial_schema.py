"""Initial schema: peers, windows and everything recorded per window (DESIGN.md §9).

Revision ID: 20261129_0001
Revises:
Create Date: 2026-11-29 09:59:27.565338
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "20261129_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("window", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=128), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("window", name=op.f("pk_checkpoints")),
    )
    op.create_table(
        "peers",
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("first_window", sa.Integer(), nullable=False),
        sa.Column("last_window", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("hotkey", name=op.f("pk_peers")),
    )
    op.create_table(
        "weight_sets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=True),
        sa.Column("uids", sa.JSON(), nullable=False),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_weight_sets")),
    )
    op.create_index(op.f("ix_weight_sets_window"), "weight_sets", ["window"])

    op.create_table(
        "windows",
        sa.Column("window", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("base_fingerprint", sa.String(length=128), nullable=False),
        sa.Column("heldout_seed", sa.String(length=128), nullable=False),
        sa.Column("config_digest", sa.String(length=128), nullable=False),
        sa.Column("code_version", sa.String(length=64), nullable=False),
        sa.Column("start_block", sa.BigInteger(), nullable=True),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.Column("aggregate_digests", sa.JSON(), nullable=False),
        sa.Column("clip_reference", sa.JSON(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('open', 'scored', 'committed')", name=op.f("ck_windows_state")),
        sa.PrimaryKeyConstraint("window", name=op.f("pk_windows")),
    )
    op.create_index(op.f("ix_windows_state"), "windows", ["state"])

    op.create_table(
        "copy_pairs",
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("hotkey_a", sa.String(length=64), nullable=False),
        sa.Column("hotkey_b", sa.String(length=64), nullable=False),
        sa.Column("overlap", sa.Double(), nullable=False),
        sa.Column("sign_agreement", sa.Double(), nullable=False),
        sa.Column("offender", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["hotkey_a"], ["peers.hotkey"], name=op.f("fk_copy_pairs_hotkey_a_peers")),
        sa.ForeignKeyConstraint(["hotkey_b"], ["peers.hotkey"], name=op.f("fk_copy_pairs_hotkey_b_peers")),
        sa.ForeignKeyConstraint(
            ["window"], ["windows.window"], name=op.f("fk_copy_pairs_window_windows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("window", "hotkey_a", "hotkey_b", name=op.f("pk_copy_pairs")),
    )
    op.create_table(
        "evaluations",
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("loss_own_before", sa.Double(), nullable=False),
        sa.Column("loss_own_after", sa.Double(), nullable=False),
        sa.Column("loss_rand_before", sa.Double(), nullable=False),
        sa.Column("loss_rand_after", sa.Double(), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("own_gain", sa.Double(), nullable=False),
        sa.Column("indicator", sa.Integer(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_evaluations_hotkey_peers")),
        sa.ForeignKeyConstraint(
            ["window"], ["windows.window"], name=op.f("fk_evaluations_window_windows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("window", "hotkey", name=op.f("pk_evaluations")),
    )
    op.create_table(
        "peer_uids",
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("first_window", sa.Integer(), nullable=False),
        sa.Column("last_window", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_peer_uids_hotkey_peers")),
        sa.PrimaryKeyConstraint("hotkey", "uid", name=op.f("pk_peer_uids")),
    )
    op.create_table(
        "penalties",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("multiplier", sa.Double(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("until_window", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_penalties_hotkey_peers")),
        sa.ForeignKeyConstraint(
            ["window"], ["windows.window"], name=op.f("fk_penalties_window_windows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_penalties")),
    )
    op.create_index(op.f("ix_penalties_hotkey"), "penalties", ["hotkey"])
    op.create_index(op.f("ix_penalties_window"), "penalties", ["window"])

    op.create_table(
        "rating_history",
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("mu", sa.Double(), nullable=False),
        sa.Column("sigma", sa.Double(), nullable=False),
        sa.Column("bma", sa.Double(), nullable=False),
        sa.Column("final_score", sa.Double(), nullable=False),
        sa.Column("penalty", sa.JSON(), nullable=False),
        sa.Column("last_evaluated_window", sa.Integer(), nullable=True),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_rating_history_hotkey_peers")),
        sa.ForeignKeyConstraint(
            ["window"], ["windows.window"], name=op.f("fk_rating_history_window_windows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("hotkey", "window", name=op.f("pk_rating_history")),
    )
    op.create_index(op.f("ix_rating_history_window"), "rating_history", ["window"])

    op.create_table(
        "ratings",
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("mu", sa.Double(), nullable=False),
        sa.Column("sigma", sa.Double(), nullable=False),
        sa.Column("bma", sa.Double(), nullable=False),
        sa.Column("final_score", sa.Double(), nullable=False),
        sa.Column("penalty", sa.JSON(), nullable=False),
        sa.Column("last_evaluated_window", sa.Integer(), nullable=True),
        sa.Column("updated_window", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_ratings_hotkey_peers")),
        sa.PrimaryKeyConstraint("hotkey", name=op.f("pk_ratings")),
    )
    op.create_index(op.f("ix_ratings_final_score"), "ratings", ["final_score"])

    op.create_table(
        "selections",
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.CheckConstraint("role IN ('gather', 'reserve')", name=op.f("ck_selections_role")),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_selections_hotkey_peers")),
        sa.ForeignKeyConstraint(
            ["window"], ["windows.window"], name=op.f("fk_selections_window_windows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("window", "hotkey", name=op.f("pk_selections")),
    )
    op.create_table(
        "submissions",
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("hotkey", sa.String(length=64), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("object_key", sa.Text(), nullable=True),
        sa.Column("etag", sa.String(length=256), nullable=True),
        sa.Column("version_id", sa.String(length=256), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("payload_digest", sa.String(length=128), nullable=True),
        sa.Column("content_digest", sa.String(length=128), nullable=True),
        sa.Column("storage_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fetched_time", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["hotkey"], ["peers.hotkey"], name=op.f("fk_submissions_hotkey_peers")),
        sa.ForeignKeyConstraint(
            ["window"], ["windows.window"], name=op.f("fk_submissions_window_windows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("window", "hotkey", name=op.f("pk_submissions")),
    )
    op.create_index(op.f("ix_submissions_content_digest"), "submissions", ["content_digest"])
    op.create_index(op.f("ix_submissions_payload_digest"), "submissions", ["payload_digest"])


def downgrade() -> None:
    op.drop_index(op.f("ix_submissions_payload_digest"), table_name="submissions")
    op.drop_index(op.f("ix_submissions_content_digest"), table_name="submissions")

    op.drop_table("submissions")
    op.drop_table("selections")
    op.drop_index(op.f("ix_ratings_final_score"), table_name="ratings")

    op.drop_table("ratings")
    op.drop_index(op.f("ix_rating_history_window"), table_name="rating_history")

    op.drop_table("rating_history")
    op.drop_index(op.f("ix_penalties_window"), table_name="penalties")
    op.drop_index(op.f("ix_penalties_hotkey"), table_name="penalties")

    op.drop_table("penalties")
    op.drop_table("peer_uids")
    op.drop_table("evaluations")
    op.drop_table("copy_pairs")
    op.drop_index(op.f("ix_windows_state"), table_name="windows")

    op.drop_table("windows")
    op.drop_index(op.f("ix_weight_sets_window"), table_name="weight_sets")

    op.drop_table("weight_sets")
    op.drop_table("peers")
    op.drop_table("checkpoints")
