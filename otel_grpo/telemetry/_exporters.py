"""`Exporters`: the meter and tracer providers a backend records into, flushed and closed within a bound.

    exporters = Exporters(settings, rank=0, world_size=1, local_rank=0)   # built from settings
    exporters = Exporters(settings, 0, 1, 0, meter_provider=mp, tracer_provider=tp)  # given: flushed, never shut down
    exporters.flush(5.0)
    exporters.close(10.0, linger=True)     # one more Prometheus scrape, then flush and shut down

Exporters block on a dead endpoint (the SDK retries a batch for its whole export timeout):
flush and close run them on a daemon thread and give up at the bound.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from .. import catalog
from ._bounded import bounded
from ._providers import (Owned, build_meter_provider, build_resource, build_tracer_provider, otlp_target,
                         otlp_unreachable, sdk_disabled, traces_target)
from ._quiet import ExportHealth
from ._settings import TelemetrySettings

logger = logging.getLogger("otel_grpo.telemetry")

DOWN_GRACE_S = 1.0
"""At shutdown with the export endpoint failing, how long the exporters still get."""
END_PROBE_S = 1.0
"""How often an ended run tries the metrics endpoint again while it waits to deliver its end."""
GONE_AFTER_S = catalog.END_GONE_AFTER_S
"""A metrics endpoint that took no export this long (and two export intervals) before the end is gone, not
restarting: the end does not wait for it (as `_prometheus.Scrapes.UNWATCHED_AFTER_S`)."""


class Exporters:
    """The given providers (flushed at close), else ones built from `settings` (shut down at close)."""

    def __init__(self, settings: TelemetrySettings, rank: int, world_size: int, local_rank: int,
                 meter_provider: MeterProvider | None = None, tracer_provider: TracerProvider | None = None) -> None:
        self._settings = settings
        self.health = ExportHealth()
        self.traces_target = traces_target(settings)
        """Where spans go, as the export warning names it."""
        self.prometheus_port: int | None = None
        self._linger: Callable[[float], bool] | None = None  # the pull endpoint's, when this process serves one
        self._closers: list[Callable[[int], Any]] = []
        self._flushers: list[Callable[[int], bool]] = []
        self._push_readers: list[Any] = []
        self._ended: list[Any] = []  # the OTLP exporters' `EndedSeries`, when this process built them
        self._owned = tracer_provider is None or meter_provider is None
        resource = None
        if tracer_provider is None:
            resource = build_resource(settings, rank, world_size)
            tracer_provider = build_tracer_provider(settings, resource, self.health)
            self._closers.append(lambda ms, tp=tracer_provider: (tp.force_flush(ms), tp.shutdown()))
        else:
            self._closers.append(lambda ms, tp=tracer_provider: _flush(tp, ms))
        self._flushers.append(lambda ms, tp=tracer_provider: _flush(tp, ms))
        if meter_provider is None:
            resource = resource or build_resource(settings, rank, world_size)
            meter_provider, owned = build_meter_provider(settings, resource, local_rank, self.health)
            self.prometheus_port = owned.prometheus_port
            self._linger = owned.linger
            self._push_readers = owned.push_readers
            self._ended = owned.ended
            self._closers.append(lambda ms, mp=meter_provider, o=owned: _close_meter(mp, o, ms))
            self._flushers.append(lambda ms, o=owned: all([_flush(r, ms) for r in o.push_readers]))
        else:
            self._closers.append(lambda ms, mp=meter_provider: _flush(mp, ms))
            self._flushers.append(lambda ms, mp=meter_provider: _flush(mp, ms))
        self.meter_provider: MeterProvider = meter_provider
        self.tracer_provider: TracerProvider = tracer_provider

    def announce(self, earlier: Iterable[tuple[str, str, Mapping[str, Any]]] = ()) -> None:
        """One export of the push readers now, on a daemon thread (never waiting on the endpoint): the
        process is seen from its start. Their first own export comes one interval later; a process
        killed before it (10-60 s) would never be seen, so no alert could say it died. `earlier`: gauge
        series (name, unit, point attributes) an earlier process of the run may have left on a collector,
        ended in this export (`EndedSeries.end_earlier`)."""
        earlier = list(earlier)
        for ended in self._ended:
            ended.end_earlier(earlier)
        readers = self._push_readers
        if readers:
            threading.Thread(target=_collect, args=(readers, self._settings.metric_export_interval_ms),
                             name="otel-grpo-announce", daemon=True).start()

    def flush(self, timeout_s: float) -> bool:
        """Push everything recorded to the exporters; False when that did not finish within `timeout_s`."""
        ms = max(int(timeout_s * 1000), 1)
        return bool(bounded(lambda: all([flush(ms) for flush in self._flushers]), "otel-grpo-flush", timeout_s).value)

    def close(self, timeout_s: float, linger: bool) -> bool:
        """`linger` (a run that ended, finished or preempted): first wait for that end to reach Prometheus
        (`deliver_end`); then flush and close everything within `timeout_s`. False: the exporters did not
        finish in time."""
        settings = self._settings
        if linger and settings.prometheus_linger_s > 0:
            self.deliver_end(settings.prometheus_linger_s)
        deadline = time.monotonic() + timeout_s
        remaining_ms = max(int((deadline - time.monotonic()) * 1000), 1)
        health = self.health
        # with the SDK disabled nothing was recorded, so no endpoint is waited for or blamed
        checked = self._owned and not health.failing and not sdk_disabled()
        unreachable = otlp_unreachable(settings) if checked else None
        down = self._owned and (health.failing or unreachable is not None)
        if unreachable is not None and not health.failures:
            # A short run exports only now: no failed export has said the endpoint is down. Said as one
            # (the run's one warning; the closing exporters' failures are then counted, not logged).
            health.failed("telemetry", unreachable, "unreachable at the end of the run")
        if down:
            # The endpoint is down: its exporters would retry the last batch for the whole export
            # timeout (10 s added to every exit). The spill holds the samples; give them a moment only.
            remaining_ms = min(remaining_ms, int(DOWN_GRACE_S * 1000))
        closers = self._closers
        if bounded(lambda: [close(remaining_ms) for close in closers], "otel-grpo-shutdown",
                   remaining_ms / 1000).finished:
            return True
        if self._owned and not health.failures:
            # Nothing failed before, yet the exporters did not finish: an endpoint that takes connections and
            # never answers (a wedged collector), within a bound shorter than the export timeout. What they held
            # is not delivered: the run's one export warning says so, and where the samples stay.
            silent = (otlp_target(settings, "metrics") if "otlp" not in settings.traces_exporters
                      and "otlp" in settings.metrics_exporters else self.traces_target)  # what did not answer
            health.failed("telemetry", silent, f"no answer within {remaining_ms / 1000:.1f}s at the end of the run")
        # Expected when the endpoint is down: its failure is the one warning (ExportHealth).
        level = logging.INFO if down or health.failing else logging.WARNING
        logger.log(level, "otel-grpo: shutdown: exporters did not finish within %.1fs%s; giving up on them",
                   remaining_ms / 1000, " (export endpoint down)" if down else "")
        return False

    def deliver_end(self, bound_s: float) -> bool:
        """Wait, at most `bound_s`, until the run's end can reach Prometheus: one more scrape of the pull
        endpoint, and an OTLP metrics endpoint that took the run's exports lately and takes connections again
        for the final one. Without it Prometheus reads the run's last values, `grpo.run.finished` = 0, and its
        alerts page a crash (GRPOMetricsAbsent): a collector restarting or Prometheus down as a run finishes.
        A watcher that took nothing for `GONE_AFTER_S` (and two export intervals) before the end is gone, not
        restarting, and is not waited for. Said in one warning where the end could not be delivered; False then."""
        began = time.monotonic()
        deadline = began + bound_s
        missed, down = [], None
        target = otlp_target(self._settings, "metrics")
        last = self.health.delivered.get(("metrics", target))
        if self._linger is not None and not self._linger(bound_s):
            missed.append("no scrape of /metrics came")
        if self._owned and self._push_readers and last is not None:
            gone = began - last > max(GONE_AFTER_S, 2 * self._settings.metric_export_interval_ms / 1000)
            down = self._probe(deadline)
            while down is not None and not gone and time.monotonic() < deadline:
                time.sleep(min(END_PROBE_S, max(deadline - time.monotonic(), 0.0)))
                down = self._probe(deadline)
            if down is not None:
                missed.append(f"{down} took no connection" + (" and had taken no export for a minute" if gone else ""))
        if not missed:
            return True
        waited = time.monotonic() - began
        text = (f"the run's end did not reach Prometheus ({'; '.join(missed)}; waited {waited:.0f}s): its alerts "
                "will take the run for crashed (GRPOMetricsAbsent)"
                + ("; raise prometheus_linger_s to wait longer" if waited >= bound_s else ""))
        if down is not None and not self.health.failures:  # the run's one export warning: nothing failed before
            self.health.failed("metrics", down, text)
        else:  # said apart: what an outage said before, or a pull endpoint (no export failed), cost the run
            logger.warning("otel-grpo: %s", text)
        return False

    def _probe(self, deadline: float) -> str | None:
        """`otlp_unreachable` for the metrics endpoint, never past `deadline` (a name lookup is not bounded by
        the connection's timeout): one that has not answered by then is down."""
        probe = bounded(lambda: otlp_unreachable(self._settings, signals=("metrics",)), "otel-grpo-probe",
                        max(min(deadline - time.monotonic(), END_PROBE_S), 0.05))
        return probe.value if probe.finished and probe.error is None else otlp_target(self._settings, "metrics")


def _collect(readers: list[Any], timeout_ms: int) -> None:
    for reader in readers:
        try:
            reader.collect(timeout_millis=timeout_ms)
        except Exception:  # a timeout, a reader shut down meanwhile: its periodic exports go on or end anyway
            logger.debug("otel-grpo: the start-up export failed", exc_info=True)


def _flush(provider: Any, timeout_ms: int) -> bool:
    flush = getattr(provider, "force_flush", None)  # the API's no-op providers have none
    return bool(flush(timeout_ms)) if flush is not None else True


def _close_meter(provider: Any, owned: Owned, timeout_ms: int) -> None:
    try:
        provider.shutdown(timeout_millis=timeout_ms)
    except Exception:  # a reader the time ran out on (an endpoint that does not answer): what it held is lost, as
        # the run's one export warning says; its traceback on the way out would say nothing more
        logger.debug("otel-grpo: the meter provider's shutdown failed", exc_info=True)
    for close in owned.closers:  # what the readers leave open (the pull endpoint's server), closed all the same
        close()
