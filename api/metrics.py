"""Prometheus metrics for the API, in a registry of its own (several apps can live in one process)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gauntlet_api_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gauntlet_api_request_seconds",
            "Time to the response's first byte, by route template",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cache = Counter(
            "gauntlet_api_cache", "Hot-read cache lookups by result", ["result"], registry=self.registry
        )
        self.rate_limited = Counter(
            "gauntlet_api_rate_limited", "Requests refused with 429", registry=self.registry
        )
        self.events = Counter(
            "gauntlet_api_events", "Events relayed from Redis by type", ["type"], registry=self.registry
        )
        self.streams_refused = Counter(
            "gauntlet_api_streams_refused",
            "/v1/events streams refused with 503 (too many in all or from one client)",
            registry=self.registry,
        )
        self.sse_clients = Gauge(
            "gauntlet_api_sse_clients", "Connected /v1/events clients", registry=self.registry
        )
        self.redis_up = Gauge(
            "gauntlet_api_redis_up",
            "1 while Redis answers, 0 while the API serves without it",
            registry=self.registry,
        )
        self.database_up = Gauge(
            "gauntlet_api_database_up",
            "1 when the API's latest read of the newest committed window succeeded, 0 when it failed",
            registry=self.registry,
        )
        self.latest_committed = Gauge(
            "gauntlet_api_latest_committed_window", "Newest committed window seen", registry=self.registry
        )


# A client picks the request method (h11 takes any token up to 16 KiB): as a label it would add a
# series per made-up method, kept forever and printed by every /metrics scrape.
KNOWN_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "other"


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (not its path: bounded labels)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_timed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                route = scope.get("route")
                template = getattr(route, "path", "unmatched")
                self.metrics.latency.labels(template).observe(time.perf_counter() - start)
                self.metrics.requests.labels(template, method_label(scope["method"]), str(status)).inc()
            await send(message)

        await self.app(scope, receive, send_timed)
