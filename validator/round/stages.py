"""A window's stages: each one `with stages("name"):`, timed, then reported to the test hook.

In a salvaged window (the service's last resort for a window that keeps failing) a stage's work
may be given up when it raises: `stages.salvage(...)` returns its fallback instead and the stage
is named in `skipped`, so the record says it was not computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import structlog

from validator.telemetry.metrics import Metrics, StageTimer

log = structlog.get_logger(__name__)
T = TypeVar("T")
Hook = Callable[[str, int], None]  # (stage, window), called after each completed stage


def no_hook(stage: str, window: int) -> None:
    return None


class Stages:
    def __init__(self, window: int, metrics: Metrics, hook: Hook = no_hook, *, salvage: bool = False) -> None:
        self.window, self.hook = window, hook
        self.timer = StageTimer(metrics)
        self.skipped: list[str] | None = [] if salvage else None

    @property
    def seconds(self) -> dict[str, float]:
        return self.timer.seconds

    @property
    def salvaged(self) -> bool:
        """Whether some stage's work was given up (a salvaged run where nothing raised is whole)."""
        return bool(self.skipped)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        with self.timer(stage):
            yield
        self.hook(stage, self.window)  # tests inject crashes here, between completed stages

    def salvage(self, stage: str, work: Callable[[], T], fallback: Callable[[], T]) -> T:
        """`work()`; in a salvaged window, `fallback()` when it raises (logged with its traceback)."""
        if self.skipped is None:
            return work()
        try:
            return work()
        except Exception:  # the salvaged window's boundary: this stage is given up, the window goes on
            log.exception("stage_skipped", stage=stage)
            self.skipped.append(stage)
            return fallback()
