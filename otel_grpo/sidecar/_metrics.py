"""The sidecar's own metrics, on a registry the app is given (never the global one).

    registry = CollectorRegistry()
    metrics = SidecarMetrics(registry, store_size=lambda: 0.0, step_cache=lambda: 0.0)
    metrics.rejected.labels("too_large").inc()
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Label values must stay bounded whatever a client sends: a made-up method (`M00042`) would
# otherwise add a series per request (20,000 of them grew /metrics to 38 MB).
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
REJECT_REASONS = ("unsupported_media_type", "unsupported_encoding", "too_large", "malformed",
                  "overloaded", "unauthorized", "store_unavailable", "worker_lost")


class SidecarMetrics:
    """Counters for ingest, rejections by reason, store size, the step cache's size and request latency."""

    def __init__(self, registry: CollectorRegistry, store_size: Callable[[], float],
                 step_cache: Callable[[], float]) -> None:
        ns = "otel_grpo_sidecar"
        self.spans = Counter("spans_ingested", "Spans received in accepted OTLP requests.", namespace=ns, registry=registry)
        self.spans_rejected = Counter("spans_rejected", "Spans reported back as rejected (partial success).",
                                      namespace=ns, registry=registry)
        self.events = Counter("sample_events_ingested", "grpo.sample events stored (new samples).",
                              namespace=ns, registry=registry)
        self.bytes = Counter("bytes_ingested", "Request body bytes as received (before decompression).",
                             ["content_type"], namespace=ns, registry=registry)
        self.rejected = Counter("requests_rejected", "Requests answered with an error, by reason.", ["reason"],
                                namespace=ns, registry=registry)
        for reason in REJECT_REASONS:  # every reason present from the start, so rate() works at once
            self.rejected.labels(reason)
        self.store_size = Gauge("store_size_bytes", "SQLite database plus WAL size on disk.", namespace=ns,
                                registry=registry)
        self.store_size.set_function(store_size)
        # What of the sidecar's memory is the runs' step histories it holds (at most `step_cache_mb`): the
        # rest of a growing RSS is something else.
        self.step_cache = Gauge("step_cache_bytes", "Step histories held in memory (at most step_cache_mb).",
                                namespace=ns, registry=registry)
        self.step_cache.set_function(step_cache)
        self.latency = Histogram("request_duration_seconds", "HTTP request latency by route template.",
                                 ["method", "route", "status"], namespace=ns, registry=registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))


class LatencyMiddleware:
    """ASGI middleware timing every HTTP request; the route label is the matched template."""

    def __init__(self, app, metrics: SidecarMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # Route templates keep the label set bounded; unmatched paths share one label.
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            code = status[0] if 100 <= status[0] <= 599 else 500
            self.metrics.latency.labels(method, route, str(code)).observe(time.perf_counter() - start)
