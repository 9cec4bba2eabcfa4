"""Who evaluated a window's peers: per worker, the peers it evaluated, their LossScore seconds and
its failures, with where it ran (host, pid, device) when known.

The window records this in its `timings` JSON under `storage.records.WORKER_TIMINGS`, beside the
stage seconds: it says how the window ran, not what it decided, so replay and the committed scores
never read it. The API (a separate process that reads only the database) serves it and the dashboard
lists it.

No imports from the round: the round's evaluation stage imports this module, and the rest of
`validator.workers` imports the round's evaluation config.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

IN_PROCESS = "in-process"  # the validator's own process, without a worker pool


@dataclass(slots=True)
class WorkerStats:
    """One worker's part of one window; `failures` counts its jobs that raised and the times it was
    lost (died, hung, or rebuilt for a wrong fingerprint)."""

    name: str
    host: str = ""
    pid: int | None = None
    device: str = ""
    peers: int = 0
    seconds: float = 0.0  # LossScore seconds summed over `peers`
    failures: int = 0

    def evaluated(self, seconds: float) -> None:
        self.peers += 1
        self.seconds += seconds

    def placed(self, host: str, pid: int, device: str) -> None:
        self.host, self.pid, self.device = host, pid, device

    def as_json(self) -> dict[str, Any]:
        per_peer = round(self.seconds / self.peers, 6) if self.peers else None
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "device": self.device,
            "peers": self.peers,
            "seconds_per_peer": per_peer,
            "failures": self.failures,
        }


def in_process(seconds: Iterable[float], failures: int, device: str) -> WorkerStats:
    """The validator's own process as the window's one worker."""
    stats = WorkerStats(IN_PROCESS, failures=failures)
    stats.placed(socket.gethostname(), os.getpid(), device)
    for s in seconds:
        stats.evaluated(s)
    return stats


def summary(workers: Iterable[WorkerStats]) -> list[dict[str, Any]]:
    """The summary as the window records it: one entry per worker, by name."""
    return [w.as_json() for w in sorted(workers, key=lambda w: w.name)]
