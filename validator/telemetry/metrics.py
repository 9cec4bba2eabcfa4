"""Prometheus metrics of the validator process and a stage timer that also feeds stored timings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.stage_seconds = Histogram(
            "gauntlet_stage_seconds", "Seconds per round stage", ["stage"], registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1200),
        )  # fmt: skip
        self.peers = Gauge(
            "gauntlet_peers", "Peers by status in the last window", ["status"], registry=self.registry
        )
        self.windows = Counter(
            "gauntlet_windows_committed_total", "Windows committed", registry=self.registry
        )
        self.failures = Counter(
            "gauntlet_window_failures_total", "Rounds that raised", registry=self.registry
        )
        self.eval_seconds = Histogram(
            "gauntlet_eval_seconds_per_peer", "LossScore seconds per evaluated peer", registry=self.registry
        )
        self.weights = Counter(
            "gauntlet_weight_sets_total", "Weight-setting attempts", ["outcome"], registry=self.registry
        )
        self.last_window = Gauge(
            "gauntlet_last_committed_window", "Last committed window", registry=self.registry
        )
        self.salvaged = Counter(
            "gauntlet_windows_salvaged_total",
            "Windows committed in salvage mode after repeated failures (stages that raised skipped)",
            registry=self.registry,
        )
        self.chain_errors = Counter(
            "gauntlet_chain_wait_errors_total", "Chain errors while waiting for a window's ready block",
            registry=self.registry,
        )  # fmt: skip
        self.failing_streak = Gauge(
            "gauntlet_window_failures_in_a_row", "Failed attempts at the current window (alert on > 3)",
            registry=self.registry,
        )  # fmt: skip
        # evaluation workers (validator/workers): per worker slot, w0, w1, ... (or "local")
        self.worker_peers = Counter(
            "gauntlet_worker_peers_evaluated_total", "Peers evaluated per worker", ["worker"],
            registry=self.registry,
        )  # fmt: skip
        self.worker_seconds = Histogram(
            "gauntlet_worker_seconds_per_peer", "LossScore seconds per peer on each worker", ["worker"],
            registry=self.registry,
        )  # fmt: skip
        self.worker_failures = Counter(
            "gauntlet_worker_failures_total",
            "Worker failures: died, hung, oom (rebuilt), fingerprint (rebuilt), archive (its read failed), "
            "job (a peer's evaluation raised)",
            ["worker", "kind"], registry=self.registry,
        )  # fmt: skip


class StageTimer:
    """`with timer("fetch"): ...` records seconds per stage for storage and Prometheus."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[stage] = round(elapsed, 6)
            self.metrics.stage_seconds.labels(stage=stage).observe(elapsed)
