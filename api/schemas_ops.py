"""Response models of the operations routes (api/routes_ops.py): liveness and readiness."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.schemas import Schema


class Health(Schema):
    status: Literal["ok"]


class Readiness(Schema):
    status: Literal["ready", "stale", "unavailable", "not_migrated", "no_windows"]
    reason: str | None = Field(default=None, description="why it is not ready")
    database: bool
    redis: Literal["up", "down", "disabled"]
    latest_committed_window: int | None
    last_commit_age_s: float | None
