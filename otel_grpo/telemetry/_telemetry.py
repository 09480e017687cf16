"""`Telemetry`: what a training loop holds; `Step`: what it writes into each step.

    tel = Telemetry.from_env(run_id="exp-42", output_dir="runs/exp-42")
    for step, batch in enumerate(loader):
        with tel.step(step) as s:
            with s.phase("rollout"): ...
            s.record(stats)            # ReducedStats or any Mapping[str, float]
            s.samples(rows, group_size=8)  # list of dicts: prompt, completion, reward, rewards, ...
    tel.finish()                       # grpo.run.finished = 1, flush, close

On the training thread a step costs a span start (none for a `logged_step`, whose
span and measured phases the emitter makes), one float conversion per value and one
queue put (with several processes and `sample_reduce="global"`, also
the step's two sample-selection collectives: scores, then the kept rows); everything
else runs on `Emitter`'s thread, or, with `emit_in="process"`, in a child process
(`ProcessEmitter`: the training thread then also pickles the step record).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import random
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.trace import Status, StatusCode, TracerProvider

from otel_grpo.catalog import stat_key

from ._emitter import Emitter, StepRecord, start_phase_span, start_step_span
from ._exchange import current_group, select_across_ranks
from ._instruments import Instruments
from ._process_emitter import ProcessEmitter
from ._providers import (Owned, build_meter_provider, build_resource, build_tracer_provider, detect_rank,
                         otlp_unreachable)
from ._quiet import ExportHealth
from ._retention import AnomalyJudge, RowBudget
from ._settings import TelemetrySettings
from ._spill import SampleSpill

logger = logging.getLogger("otel_grpo.telemetry")
_SCOPE = "otel_grpo"
DOWN_GRACE_S = 1.0
"""At shutdown with the export endpoint failing, how long the exporters still get."""


def _to_floats(stats: Mapping[str, Any]) -> dict[str, float]:
    """The one float conversion of the step (a 0-d tensor here is a host sync: reduce first)."""
    try:
        return {k: float(v) for k, v in stats.items()}
    except (TypeError, ValueError):
        pass
    out: dict[str, float] = {}
    for key, value in stats.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            logger.debug("otel-grpo: %r is not a number (%r); dropped", key, type(value).__name__)
    return out


class Step:
    """One training step: phases, stats and sample rows. Use through `Telemetry.step`."""

    __slots__ = ("_tel", "_record")

    def __init__(self, tel: Telemetry, record: StepRecord) -> None:
        self._tel = tel
        self._record = record

    @property
    def step(self) -> int:
        return self._record.step

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase: child span `grpo.phase.<name>` and a `grpo.phase.duration` observation."""
        if self._tel._tracer is None:  # emit_in="process": the child makes the span, as for a measured phase
            start = time.perf_counter()
            try:
                yield
            finally:
                self._record_measured_phase(name, time.perf_counter() - start, time.time_ns())
            return
        span = start_phase_span(self._tel._tracer, self._tel.run_id, self.step, name, self._parent())
        token = otel_context.attach(trace.set_span_in_context(span))
        start = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            self._record.phases.append((name, time.perf_counter() - start))
            otel_context.detach(token)
            span.end()

    def _parent(self) -> otel_context.Context | None:
        """None (the current context: the step span) in `step()`; in a `logged_step`, whose span
        is left to the emitter, that span, started here on first need."""
        rec = self._record
        if rec.start_ns is None:
            return None
        if rec.span is None:
            rec.span = start_step_span(self._tel._tracer, self._tel.run_id, rec.step, rec.start_ns)
        return trace.set_span_in_context(rec.span)

    def record(self, stats: Mapping[str, Any], **scalars: Any) -> None:
        """Scalars of the step (stat keys, TRL or verl names); per-sample vectors from `ReducedStats.samples`.

        Host-side scalars go in as keywords, `s.record(reduced, learning_rate=lr)`, so
        that `reduced` keeps its `.samples` (a `{**reduced, ...}` copy would drop them).
        May be called several times per step.
        """
        self._record.scalars.append(_to_floats(stats))
        if scalars:
            self._record.scalars.append(_to_floats(scalars))
        samples = getattr(stats, "samples", None)
        if samples:
            # Copies: the caller may reuse its lists once this returns.
            self._record.samples.append({k: list(v) for k, v in samples.items()})

    def samples(
        self, rows: Sequence[Mapping[str, Any]] | Mapping[str, Any], *, group_size: int | None = None
    ) -> None:
        """Candidate sample rows; the step's top/bottom/random selection runs once over every call's rows
        (and, with `sample_reduce="global"`, every rank's).

        `group_size`: rows g*G .. g*G+G-1 of this call share a prompt; kept rows then carry
        `completion_index`, `group_size` and `reward_rank` (1: best in its group). Every kept
        row carries `source_rank`. Rows are read later: pass dicts you do not mutate afterwards.
        """
        if rows is None:
            return
        if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                       or group_size < 1):
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        listed = [rows] if isinstance(rows, Mapping) else list(rows)
        self._record.rows.append((time.time_ns(), listed, group_size))

    def record_phase(self, name: str, seconds: float, *, end_ns: int | None = None) -> None:
        """A phase measured elsewhere (a framework's own timer): the same span and histogram as `phase`.

        The span ends at `end_ns` (default: now) and starts `seconds` earlier.
        """
        if not name:
            raise ValueError("name: a phase needs a name")
        seconds = float(seconds)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds: a phase duration must be finite and >= 0, got {seconds!r}")
        self._record_measured_phase(name, seconds, time.time_ns() if end_ns is None else int(end_ns))

    def _record_measured_phase(self, name: str, seconds: float, end_ns: int) -> None:
        self._record.measured.append((name, seconds, end_ns))  # its span is made on the emitter thread
        self._record.phases.append((name, seconds))

    def skip(self) -> None:
        """Mark the step's update as skipped (counted by `grpo.skipped_steps`)."""
        self._record.skipped = True


class _NullStep(Step):
    """What non-exporting ranks get: same calls, nothing exported; sample rows are kept for the
    step's selection across ranks."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def record(self, stats: Mapping[str, Any], **scalars: Any) -> None:
        pass

    def _record_measured_phase(self, name: str, seconds: float, end_ns: int) -> None:
        pass


class Telemetry:
    """Emits a GRPO run's metrics, step/phase spans and sample records through OpenTelemetry.

    Providers default to ones built from `settings` (exporters, resource, limits);
    pass your own to attach to an existing set-up (they are flushed, not shut down).
    Only rank 0 exports unless `settings.export_all_ranks`.
    """

    def __init__(
        self,
        settings: TelemetrySettings | None = None,
        *,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.settings = settings = settings or TelemetrySettings()
        self.rank, self.world_size = detect_rank()
        self.exporting = settings.export_all_ranks or self.rank == 0
        self._closed = False
        self._lock = threading.Lock()
        self._last_step: int | None = None
        self._closers: list[Callable[[int], None]] = []
        self._flushers: list[Callable[[int], bool]] = []
        self.prometheus_port: int | None = None
        self._linger: Callable[[float], None] | None = None  # the pull endpoint's, when this process serves one
        self.export_health = ExportHealth()
        self.spill: SampleSpill | None = None
        self._owns_exporters = False
        self._tracer: trace.Tracer | None = None  # None: spans are made by the emitter only (emit_in="process")
        self._emitter: Emitter | ProcessEmitter
        if settings.emit_in == "process" and self.exporting:
            if meter_provider is not None or tracer_provider is not None:
                raise ValueError("emit_in: 'process' builds its exporters in the child process; pass no "
                                 "meter_provider / tracer_provider, or use emit_in='thread'")
            self._owns_exporters = True
            self._emitter = ProcessEmitter(settings, rank=self.rank, world_size=self.world_size,
                                           local_rank=int(os.environ.get("LOCAL_RANK", self.rank)),
                                           take_over=lambda: self._thread_emitter(None, None)[0])
            self.prometheus_port = self._emitter.prometheus_port or self.prometheus_port
        else:
            if not self.exporting:
                meter_provider, tracer_provider = NoOpMeterProvider(), trace.NoOpTracerProvider()
            self._emitter, self._tracer = self._thread_emitter(meter_provider, tracer_provider)
        self._select_rng = random.Random(settings.seed)  # the training thread's: rank 0 seeds every rank's draw
        self._judge = AnomalyJudge(settings)  # anomalous steps keep every row (rank 0's verdict)
        self._budget = RowBudget(settings)  # ... within the run's budget, counted alike on every rank
        self._warned_exchange = False
        atexit.register(self.shutdown)

    def _thread_emitter(
        self, meter_provider: MeterProvider | None, tracer_provider: TracerProvider | None
    ) -> tuple[Emitter, trace.Tracer]:
        """An emitter thread of this process and the tracer it uses, with the given or built providers."""
        meter_provider, tracer_provider = self._providers(meter_provider, tracer_provider)
        base: dict[str, Any] = {"run_id": self.settings.run_id}
        if self.settings.export_all_ranks and self.world_size > 1:
            base["rank"] = self.rank  # per-rank series would otherwise collide
        tracer = tracer_provider.get_tracer(_SCOPE)
        instruments = Instruments(meter_provider.get_meter(_SCOPE), base)
        suffix = f"_rank{self.rank}" if "rank" in base else ""  # ranks must not append to one file
        if self.settings.spill_samples and self.exporting:
            self.spill = SampleSpill(self.settings.output_dir, suffix)
        return Emitter(self.settings, instruments, tracer, self.spill, rank=self.rank), tracer

    def _providers(
        self, meter_provider: MeterProvider | None, tracer_provider: TracerProvider | None
    ) -> tuple[MeterProvider, TracerProvider]:
        """The given providers (flushed at shutdown), else ones built from settings (shut down)."""
        resource = None
        self._owns_exporters = tracer_provider is None or meter_provider is None  # built from settings
        if tracer_provider is None:
            resource = build_resource(self.settings, self.rank, self.world_size)
            tracer_provider = build_tracer_provider(self.settings, resource, self.export_health)
            self._closers.append(lambda ms, tp=tracer_provider: (tp.force_flush(ms), tp.shutdown()))
        else:
            self._closers.append(lambda ms, tp=tracer_provider: _flush(tp, ms))
        self._flushers.append(lambda ms, tp=tracer_provider: _flush(tp, ms))
        if meter_provider is None:
            resource = resource or build_resource(self.settings, self.rank, self.world_size)
            local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
            meter_provider, owned = build_meter_provider(self.settings, resource, local_rank, self.export_health)
            self.prometheus_port = owned.prometheus_port
            self._linger = owned.linger
            self._closers.append(lambda ms, mp=meter_provider, o=owned: _close_meter(mp, o, ms))
            self._flushers.append(lambda ms, o=owned: all([_flush(r, ms) for r in o.push_readers]))
        else:
            self._closers.append(lambda ms, mp=meter_provider: _flush(mp, ms))
            self._flushers.append(lambda ms, mp=meter_provider: _flush(mp, ms))
        return meter_provider, tracer_provider

    @classmethod
    def from_env(cls, run_id: str | None = None, output_dir: str | None = None, **overrides: Any) -> Telemetry:
        """Settings from `OTEL_GRPO_*` / `OTEL_*` variables; the arguments given here win."""
        given = {"run_id": run_id, "output_dir": output_dir, **overrides}
        return cls(TelemetrySettings(**{k: v for k, v in given.items() if v is not None}))

    @property
    def run_id(self) -> str:
        return self.settings.run_id

    @property
    def closed(self) -> bool:
        """`shutdown()` or `finish()` has run: nothing more is exported."""
        return self._closed

    def _advance(self, step: int, count_one: bool) -> int:
        """Increment of `grpo.steps`: 1 per `step()`; `log_metrics` adds the steps since the last call."""
        with self._lock:
            last = self._last_step
            self._last_step = step if last is None else max(step, last)
        if count_one or last is None:
            return 1
        return max(step - last, 0)

    def step(self, step: int) -> AbstractContextManager[Step]:
        """One training step: the `grpo.step` span, current for everything inside.

        An exception escaping the block marks the span as an error and the step as
        skipped (`grpo.skipped_steps`), and propagates. With `sample_reduce="global"`
        and several processes, every rank must enter it: leaving the block runs the
        step's sample selection across ranks (two collectives, on this thread).
        """
        return self._open(step, count_one=True)

    def logged_step(self, step: int) -> AbstractContextManager[Step]:
        """A step that stands for every step since the last one (a trainer that logs every N steps).

        As `step()`, except that `grpo.steps` advances by the steps since the previous
        call, and that its `grpo.step` span is not current inside the block: the emitter
        thread starts it (with the block's start time), off the training thread, unless a
        `phase()` inside needs it as parent. Every rank must enter it (it runs the same
        sample selection across ranks).
        """
        return self._open(step, count_one=False, gather_samples=True)

    @contextmanager
    def _open(self, step: int, count_one: bool, gather_samples: bool | None = None) -> Iterator[Step]:
        """`gather_samples` (default: `count_one`) runs the cross-rank sample selection on a clean exit.

        A `step()` span is current inside the block; a logged step's span is left to the
        emitter thread (started there with the block's start time) unless `phase()` needs it.
        """
        step = int(step)
        gather = count_one if gather_samples is None else gather_samples
        if self._closed or not self.exporting:
            record = StepRecord(step, None, 0)
            yield _NullStep(self, record)
            if gather:
                self._select_across_ranks(record)  # this rank's rows compete; rank 0 exports the kept ones
            return
        record = StepRecord(step, None, self._advance(step, count_one))
        token = None
        if count_one and self._tracer is not None:
            record.span = start_step_span(self._tracer, self.run_id, step)
            token = otel_context.attach(trace.set_span_in_context(record.span))
        else:
            record.start_ns = time.time_ns()
        clean = False
        try:
            yield Step(self, record)
            clean = True
        except BaseException as exc:
            if self._tracer is None:
                record.error = (type(exc).__name__, str(exc))  # the emitter marks the span it makes
            else:
                if record.span is None:
                    record.span = start_step_span(self._tracer, self.run_id, step, record.start_ns)
                record.span.record_exception(exc)
                record.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            record.skipped = True
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
            record.keep_reason = self._judge(record.scalars, record.skipped)  # a few dict lookups
            if clean and gather:
                record.picked = self._select_across_ranks(record)
            record.end_ns = time.time_ns()
            self._emitter.submit(record)  # the span ends on the emitter, after its attributes are set

    def _select_across_ranks(self, record: StepRecord) -> list | None:
        """The step's kept rows of every rank on rank 0, [] on the others; None with one process or per-rank selection."""
        if self.settings.sample_reduce != "global" or not self.settings.samples_per_step:
            return None  # every rank has the same settings: all skip the collectives together
        group = current_group()
        if group is None:
            return None
        try:
            kept = select_across_ranks(record.rows, self.settings, self._select_rng, group, record.keep_reason,
                                       self._budget)
            return [] if kept is None else kept  # only rank 0 emits them, even when every rank exports
        except Exception:  # telemetry never stops training; the rows of this step are lost, said once
            if not self._warned_exchange:
                self._warned_exchange = True
                logger.warning("otel-grpo: selecting samples across ranks failed; this step's samples are lost",
                               exc_info=True)
            return []

    def log_metrics(self, step: int, metrics: Mapping[str, Any], *, source: str | None = None) -> None:
        """Record a metrics dict outside a `step()` block; TRL, verl or MaxEnt names map through the catalog.

        `source` ("trl", "verl", "maxent"): whose names `metrics` uses, where a peer's name means
        another signal than our key of that name (`log_metrics(s, {"kl": x}, source="trl")` is
        TRL's bias-corrected `grpo.trl.kl`; without a source `kl` is the plain k3 `grpo.kl`).
        """
        named = metrics if source is None else {stat_key(k, source): v for k, v in metrics.items()}
        with self._open(step, count_one=False) as s:
            s.record(named)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Process everything recorded so far and push it to the exporters; False on timeout."""
        timeout_s = self.settings.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        if not self._closed and not self._emitter.drain(timeout_s):
            return False
        remaining = max(deadline - time.monotonic(), 0.001)
        ms = max(int(remaining * 1000), 1)
        # The SDK's force_flush outlasts its timeout on a dead endpoint (its exporter retries for the
        # whole export timeout, 10 s): a daemon thread keeps the bound, as in shutdown.
        done: list[bool] = []
        worker = threading.Thread(target=lambda: done.append(all([flush(ms) for flush in self._flushers])),
                                  name="otel-grpo-flush", daemon=True)
        worker.start()
        worker.join(remaining)
        return bool(done and done[0])

    def finish(self) -> None:
        """The run ended on purpose (completed, or stopped by the user): `grpo.run.finished` = 1, then `shutdown`.

        Alerts tell a finished run from one that stopped exporting (a crash) by this
        gauge, so call it on every deliberate end and never on an error path.
        """
        self.shutdown(finished=True)

    def shutdown(self, finished: bool = False, preempted: bool = False) -> None:
        """Drain the queue (the spill is complete after this), flush, close; bounded by `shutdown_timeout_s`.

        `finished=True` is `finish()`. The exit hook calls this with False: a process
        that exits without finishing its run did not end it on purpose. `preempted=True`:
        a scheduler stopped the run (SIGTERM) to resume it later, `grpo.run.preempted` = 1.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.shutdown)
        timeout = self.settings.shutdown_timeout_s
        if preempted and self.exporting:
            self._emitter.submit_scalars({"run_preempted": 1.0})  # queued before the end, either emitter
        if isinstance(self._emitter, ProcessEmitter) and self._emitter.close_child(timeout, finished):
            return  # the child ended the run and closed its exporters; else this process took over
        if finished and self.exporting:
            self._emitter.submit_scalars({"run_finished": 1.0})
        deadline = time.monotonic() + timeout
        if not self._emitter.close(timeout / 2):
            logger.warning("otel-grpo: shutdown: the emit queue did not drain within %.1fs", timeout / 2)
        if finished and self._linger is not None and self.settings.prometheus_linger_s > 0:
            self._linger(self.settings.prometheus_linger_s)  # until one more scrape has seen run_finished = 1
        closers = self._closers
        remaining_ms = max(int((deadline - time.monotonic()) * 1000), 1)
        unreachable = None if not self._owns_exporters or self.export_health.failing else otlp_unreachable(self.settings)
        down = self._owns_exporters and (self.export_health.failing or unreachable is not None)
        if unreachable is not None and not self.export_health.failures:
            # A short run exports only now: no failed export has said the endpoint is down. Said as one
            # (the run's one warning; the closing exporters' failures are then counted, not logged).
            self.export_health.failed("telemetry", unreachable, "unreachable at the end of the run")
        if down:
            # The endpoint is down: its exporters would retry the last batch for the whole export
            # timeout (10 s added to every exit). The spill holds the samples; give them a moment only.
            remaining_ms = min(remaining_ms, int(DOWN_GRACE_S * 1000))
        # Exporters may block on a dead endpoint; a daemon thread keeps the bound.
        worker = threading.Thread(
            target=lambda: [close(remaining_ms) for close in closers], name="otel-grpo-shutdown", daemon=True
        )
        worker.start()
        worker.join(remaining_ms / 1000)
        if worker.is_alive():
            # Expected when the endpoint is down: its failure is the one warning (ExportHealth).
            level = logging.INFO if down or self.export_health.failing else logging.WARNING
            logger.log(level, "otel-grpo: shutdown: exporters did not finish within %.1fs%s; giving up on them",
                       remaining_ms / 1000, " (export endpoint down)" if down else "")

def _flush(provider: Any, timeout_ms: int) -> bool:
    flush = getattr(provider, "force_flush", None)  # the API's no-op providers have none
    return bool(flush(timeout_ms)) if flush is not None else True


def _close_meter(provider: Any, owned: Owned, timeout_ms: int) -> None:
    provider.shutdown(timeout_millis=timeout_ms)
    for close in owned.closers:
        close()
