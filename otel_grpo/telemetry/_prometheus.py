"""The Prometheus pull endpoint (local mode): `/metrics` served from the trainer process.

    served = prometheus_reader(settings, local_rank=0)   # None if the port is busy
    MeterProvider(metric_readers=[served.reader])
    ...
    served.linger(2.5)                                   # after finish(): until one more scrape read it
    served.close()
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from opentelemetry.sdk.metrics.export import MetricReader

from .. import catalog
from ._settings import TelemetrySettings

logger = logging.getLogger("otel_grpo.telemetry")


class _HistogramCounts:
    """Serves the reader's families, adding `_count` to histograms that lack it.

    prometheus_client leaves out `_count` and `_sum` of a histogram whose first
    bucket is negative (reward, advantage), while the collector's exporter keeps
    them, so `grpo_sample_reward_count` would exist in compose mode only. The count
    is the `+Inf` bucket, so it is added back; `_sum` stays out, as OpenMetrics
    requires for histograms with negative buckets.
    """

    def __init__(self, source: Any, scrapes: Scrapes) -> None:
        self._source = source  # the registry the OTel reader registered itself in
        self._scrapes = scrapes

    def collect(self) -> Iterator[Any]:
        from prometheus_client.samples import Sample

        seq = self._scrapes.begin()
        yield from self._families(Sample)
        self._scrapes.end(seq)

    def _families(self, Sample: Any) -> Iterator[Any]:  # noqa: N803 (the class, imported lazily)
        for family in self._source.collect():
            if family.type == "histogram" and not any(s.name.endswith("_count") for s in family.samples):
                samples = []
                for sample in family.samples:
                    samples.append(sample)
                    if sample.name.endswith("_bucket") and sample.labels.get("le") == "+Inf":
                        # Right after its last bucket: OpenMetrics keeps a histogram's samples together.
                        labels = {k: v for k, v in sample.labels.items() if k != "le"}
                        samples.append(Sample(family.name + "_count", labels, sample.value, sample.timestamp))
                family.samples = samples
            yield family


class Scrapes:
    """Scrapes of the endpoint, numbered as they begin, so that `wait_after` can wait for one that read
    the values set before it was called."""

    # An endpoint served this long without a scrape has nobody watching it: scrape intervals run
    # from 1 s (local mode) to 60 s. A shorter-lived one may simply not have been reached yet. The
    # pull side of the judgment the push side makes of a silent collector (`_exporters.GONE_AFTER_S`).
    UNWATCHED_AFTER_S = catalog.END_GONE_AFTER_S
    # Never scraped: how long a short-lived endpoint waits for a first scrape that may be on its way.
    FIRST_SCRAPE_S = 2.5

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._begun = 0
        self._done = 0  # the highest number of a completed scrape
        self._since = time.monotonic()  # the endpoint's start, then each scrape's end: how long it went unread
        self._interval = 0.0  # between the last two scrapes' ends: the watcher's interval

    def begin(self) -> int:
        with self._cond:
            self._begun += 1
            return self._begun

    def end(self, seq: int) -> None:
        with self._cond:
            now = time.monotonic()
            if self._done:
                self._interval = now - self._since
            self._done = max(self._done, seq)
            self._since = now
            self._cond.notify_all()

    def wait_after(self, timeout_s: float) -> bool:
        """Until a scrape that begins after this call has completed, at most `timeout_s`; False where a watcher
        that scraped the endpoint missed what is set now. A watcher scrapes again within its interval; one that
        is late (Prometheus restarting) is waited for up to the bound, since a run's end it never reads is taken
        for a crash. Nothing is waited for where the endpoint went unread, as this is called, for
        `UNWATCHED_AFTER_S` (and twice its watcher's interval): never scraped, nobody watches it (True: nothing
        that reads it is left behind); scraped before, its watcher is gone (False). An endpoint never scraped yet
        waits at most `FIRST_SCRAPE_S` (a first scrape may be on its way)."""
        with self._cond:
            if time.monotonic() - self._since >= max(self.UNWATCHED_AFTER_S, 2 * self._interval):
                return not self._done
            if not self._done:
                self._cond.wait_for(lambda: self._done > 0, min(timeout_s, self.FIRST_SCRAPE_S))
                return True
            mark = self._begun
            return self._cond.wait_for(lambda: self._done > mark, timeout_s)


@dataclass
class ServedReader:
    reader: MetricReader
    port: int
    close: Callable[[], None]
    scrapes: Scrapes = field(default_factory=Scrapes)

    def linger(self, timeout_s: float) -> bool:
        """Keep serving until one more scrape has read what is set now (`grpo.run.finished` = 1), at most
        `timeout_s`: the end of a run waits one scrape interval of its watcher (`Scrapes.wait_after`). False:
        its watcher did not scrape it in time."""
        return self.scrapes.wait_after(timeout_s)


def prometheus_reader(settings: TelemetrySettings, local_rank: int) -> ServedReader | None:
    """A `PrometheusMetricReader` and its HTTP server; None (and a warning) if the port is busy."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    port = settings.prometheus_port
    if settings.export_all_ranks and port:
        port += local_rank  # one endpoint per rank on a node
    # Registries per Telemetry: two instances in one process (tests, notebooks) stay apart.
    served = CollectorRegistry(auto_describe=False)
    try:
        server, _thread = start_http_server(port, addr=settings.prometheus_host, registry=served)
    except OSError as exc:
        # A busy port or a bad address must not stop a training run from starting; the spans and spill still work.
        # An address this machine does not have (or a name that does not resolve) is the host's fault, else the port's.
        host_at_fault = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
        advice = ("set OTEL_GRPO_PROMETHEUS_HOST to an address of this machine (127.0.0.1, 0.0.0.0)" if host_at_fault
                  else "another process holds the port? set OTEL_GRPO_PROMETHEUS_PORT")
        logger.warning("otel-grpo: cannot serve Prometheus metrics on %s:%d (%s); %s",
                       settings.prometheus_host, port, exc, advice)
        return None
    inner = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(registry=inner)
    scrapes = Scrapes()
    served.register(_HistogramCounts(inner, scrapes))
    bound = server.server_address[1]
    logger.info("otel-grpo: Prometheus metrics on http://%s:%d/metrics", settings.prometheus_host, bound)

    def close() -> None:
        server.shutdown()
        server.server_close()

    return ServedReader(reader, bound, close, scrapes)
