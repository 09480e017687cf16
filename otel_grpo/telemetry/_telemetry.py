"""`Telemetry`: what a training loop holds; `Step`: what it writes into each step.

    with Telemetry.from_env(run_id="exp-42", output_dir="runs/exp-42") as tel:
        for step, batch in enumerate(loader):
            with tel.step(step) as s:
                with s.phase("rollout"): ...
                s.record(stats)            # ReducedStats or any Mapping[str, float]
                s.samples(rows, group_size=8)  # list of dicts: prompt, completion, reward, rewards, ...
    # the block's end is `tel.finish()`: grpo.run.finished = 1, flush, close (an exception: `shutdown()`)

On the training thread a step only fills a `StepRecord` (plain data: times, floats, rows):
a clock read per phase and per step, one float conversion per value and one hand-over to
the sink (with several processes and `sample_reduce="global"`, also the step's judging and its
two sample-selection collectives: scores, then the kept rows). The sink (`_sinks`) carries
the record to the one `Backend`, on a thread of this process (`emit_in="thread"`) or in a
child process (`emit_in="process"`: the training thread then also pickles it), and the
backend runs the step's deferred recordings (`Step.defer`), judges it (anomalous steps keep
every row) and makes its spans, metrics, sample events and spill lines after the fact.

The `grpo.step` span is therefore never the current span on the training thread, nor is a
phase span: spans of your own inside a step are not their children. Tie them to the step
with its attributes (`Step.attributes`: `grpo.run_id` and `grpo.step`, the attributes every
span of ours carries), e.g. `tracer.start_as_current_span("my.work", attributes=s.attributes)`.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import random
import sys
import threading
import time
import weakref
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterator, Mapping

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from otel_grpo.catalog import peer_scalars, spans

from . import _clock as clock
from . import _preemption
from ._attempt import next_attempt
from ._backend import Backend
from ._exchange import ProcessGroup, current_group, select_across_ranks
from ._process_sink import ProcessSink
from ._providers import detect_rank, sdk_disabled
from ._quiet import ExportHealth
from ._rank_ends import RankEnds
from ._record import Heartbeat, StepRecord, error_of
from ._retention import AnomalyJudge, RowBudget
from ._settings import TelemetrySettings
from ._sinks import NullSink, ThreadSink
from ._step import Step, checked_mapping, checked_seconds, run_deferred
from ._writes import WriteBeats

logger = logging.getLogger("otel_grpo.telemetry")
_HEARTBEAT_EVERY_S = 1.0

_exporting: weakref.WeakSet[Telemetry] = weakref.WeakSet()
"""The exporting `Telemetry` objects of this process: what a forked child must not take for its own runs."""


def _forget_inherited_runs() -> None:
    """In a forked child (a data loader's worker, a helper that exits with `sys.exit`): a run belongs to the process
    that opened it, so every `Telemetry` the child inherited becomes one that does not export (`_inherited`).
    Else its exit hook ended the parent's run as a crash with a false warning, and, with the process sink, waited
    on the parent's telemetry process and emitted its unacknowledged steps again (duplicate spill lines)."""
    for telemetry in list(_exporting):
        telemetry._inherited()
    _exporting.clear()


os.register_at_fork(after_in_child=_forget_inherited_runs)


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
        _off: bool = False,
    ) -> None:
        self.settings = settings = settings or TelemetrySettings()
        self.rank, self.world_size = detect_rank()
        self.exporting = not _off and (settings.export_all_ranks or self.rank == 0)
        self._closed = False
        self._lock = threading.Lock()
        self._counted: tuple[int, int] | None = None  # (attempt, its latest step) that `grpo.steps` counted
        self.attempt = next_attempt(self.world_size)
        """This process's attempt at its steps (`grpo.attempt`; `_attempt`: with several ranks the process's start,
        so one job's ranks carry attempts together): a relaunched or resumed run's is larger, so the sidecar
        replaces what an earlier attempt stored for a step this one sends again."""
        self._attempt_trained = False  # a training step went out under `attempt` (`new_attempt`)
        self._sink = self._open_sink(meter_provider, tracer_provider) if self.exporting else NullSink()
        self._select_rng = random.Random(settings.seed)  # the training thread's: rank 0 seeds every rank's draw
        self._judge = AnomalyJudge(settings)  # rank 0's verdict where rows are selected across ranks; else the backend's
        self._budget = RowBudget(settings)  # ... within the run's budget, counted alike on every rank
        self._warned_exchange = False
        self._warned_closed = False
        self._last_beat = -math.inf  # monotonic time of the last heartbeat handed to the sink
        self._rank_ends: RankEnds | None = None  # where this rank's end goes, once its process group is up
        self._joined = _off or self.world_size <= 1
        if self.exporting and sdk_disabled():  # set for a whole cluster, it would silence the run without a word
            spill = f"; samples still spill to {settings.output_dir / 'samples'}" if settings.spill_samples else ""
            logger.warning("otel-grpo: OTEL_SDK_DISABLED=true turns OpenTelemetry off in this process: run %r "
                           "exports no metrics or spans%s (unset it to export)", settings.run_id, spill)
        atexit.register(self._at_exit)
        if self.exporting:
            _exporting.add(self)
        if self.exporting or not self._joined:  # every rank of a job writes its end before SIGTERM kills it
            _preemption.watch(self)  # SIGTERM left to its default would end the run as a crash
        if not self._joined:
            self._join_ranks()

    def _inherited(self) -> None:
        """This object came to a forked child with its parent's open run (`_forget_inherited_runs`): from here
        on it is a rank that does not export. Its steps, flushes and end (`finish()`, the exit hook) touch no sink,
        pipe or spill of the parent's, and it says nothing at exit."""
        self._lock = threading.Lock()  # another thread of the parent may have held it at the fork
        self.exporting = False
        self._sink = NullSink()

    def _at_exit(self) -> None:
        """The interpreter exits with the run still open: `shutdown()`, so the run ends unfinished (a crash to
        the alerts). Where the exit looks deliberate (no uncaught exception), a forgotten `finish()` is the
        likely cause, and the page it will bring is said here, once, where the user can fix it."""
        if not self._closed and self.exporting and self._counted is not None \
                and getattr(sys, "last_value", None) is None:
            logger.warning("otel-grpo: the process exits with run %r not finished (last step %d), so its alerts "
                           "see a crash; call finish() when training completes (shutdown() on an error path), or "
                           "train inside `with telemetry:`", self.settings.run_id, self._counted[1])
        self.shutdown()

    def _open_sink(self, meter_provider: MeterProvider | None,
                   tracer_provider: TracerProvider | None) -> ThreadSink | ProcessSink:
        """The sink `emit_in` names; both run the same backend, over the given or built providers."""
        settings, rank, world = self.settings, self.rank, self.world_size
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        if settings.emit_in == "process":
            if meter_provider is not None or tracer_provider is not None:
                raise ValueError("emit_in: 'process' builds its exporters in the child process; pass no "
                                 "meter_provider / tracer_provider, or use emit_in='thread'")
            return ProcessSink(settings, rank=rank, world_size=world, local_rank=local_rank)
        return ThreadSink(lambda: Backend.build(settings, rank, world, local_rank, meter_provider, tracer_provider))

    @classmethod
    def disabled(cls) -> Telemetry:
        """Telemetry turned off: every call works; nothing is exported, spilled or exchanged between ranks.

        The same null sink as a rank that does not export; no setting is read from the environment.
        """
        return cls(TelemetrySettings.model_construct(sample_reduce="per_rank"), _off=True)

    @classmethod
    def from_env(cls, run_id: str | None = None, output_dir: str | None = None, *,
                 defaults: dict[str, Any] | None = None, **overrides: Any) -> Telemetry:
        """Settings from `OTEL_GRPO_*` / `OTEL_*` variables; the arguments given here win. `defaults`
        (an integration's run id, output dir, model name) apply only where no variable sets the field."""
        given = {"run_id": run_id, "output_dir": output_dir, **overrides}
        given = {k: v for k, v in given.items() if v is not None}
        return cls(TelemetrySettings.with_defaults(defaults or {}, **given))

    @property
    def run_id(self) -> str:
        return self.settings.run_id

    @property
    def closed(self) -> bool:
        """`shutdown()` or `finish()` has run: nothing more is exported."""
        return self._closed

    def _advance(self, step: int, count_one: bool, attempt: int) -> int:
        """Increment of `grpo.steps`: 1 per `step()`; `log_metrics` adds the steps since the last call of the
        newest attempt (its first step counts 1: after `new_attempt()` the steps it runs again are work done, as
        they are through `step()`)."""
        with _preemption.deferred(), self._lock:  # shutdown takes the lock too
            counted = self._counted
            before = counted[1] if counted is not None and counted[0] == attempt else None
            if counted is None or attempt >= counted[0]:  # an older attempt's record moves no step (`Backend`)
                self._counted = (attempt, step if before is None else max(step, before))
        if count_one or before is None:
            return 1
        return max(step - before, 0)

    def new_attempt(self) -> int:
        """Start a newer attempt at the run's steps in this process, and return it (`grpo.attempt`).

        Call it where a loop goes back to a checkpoint and runs its steps again without a new process
        (a notebook's `trainer.train(resume_from_checkpoint=...)` after a failed `train()`; the TRL
        callbacks call it at every train begin): the sidecar then replaces what the failed attempt stored for
        each step run again and drops its later steps, and the gauges serve the new attempt's values only.
        A new process is a new attempt already, and so is an attempt no training step went out under yet: it is
        kept (the callbacks' first train begin keeps the process's start, which one job's ranks share).
        """
        with self._lock:
            if self._attempt_trained:
                self.attempt, self._attempt_trained = next_attempt(self.world_size), False
            return self.attempt

    def step(self, step: int) -> AbstractContextManager[Step]:
        """One training step: the `grpo.step` span, from the block's start to its end.

        The span is made after the block, off the training thread, so it is not the current
        span inside it (tie spans of your own to the step with `Step.attributes`). An
        exception escaping the block marks the span as an error and the step as skipped
        (`grpo.skipped_steps`), and propagates. With `sample_reduce="global"` and several
        processes, every rank must enter it: leaving the block runs the step's sample
        selection across ranks (two collectives, on this thread).
        """
        return self._open(step, count_one=True)

    def logged_step(self, step: int, *, evaluation: bool = False,
                    attempt: int | None = None) -> AbstractContextManager[Step]:
        """A step that stands for every step since the last one (a trainer that logs every N steps).

        As `step()`, except that `grpo.steps` advances by the steps since the previous
        call. Every rank must enter it (it runs the same sample selection across ranks).
        `evaluation`: what it records is an evaluation's, as in `log_metrics`.
        `attempt`: which attempt at the step wrote what is re-emitted (`otel-grpo follow`: a relaunched job's
        is larger); default `self.attempt`.
        """
        return self._open(step, count_one=False, gather_samples=True, evaluation=evaluation, attempt=attempt)

    @contextmanager
    def _open(self, step: int, count_one: bool, gather_samples: bool | None = None,
              evaluation: bool = False, attempt: int | None = None) -> Iterator[Step]:
        """`gather_samples` (default: `count_one`) runs the cross-rank sample selection on a clean exit."""
        step = spans.check_step(step)
        if not isinstance(evaluation, bool):
            raise ValueError(f"evaluation must be True or False, got {evaluation!r}")
        if attempt is not None and (type(attempt) is not int or not 0 <= attempt <= spans.MAX_STEP):
            raise ValueError(f"attempt must be an int in 0 .. 2**63 - 1, got {attempt!r}")
        gather = count_one if gather_samples is None else gather_samples
        if not self._joined:  # before the step's work: a rank may fall in its very first step
            self._join_ranks()
        if attempt is None and not evaluation:
            self._attempt_trained = True
        attempt = self.attempt if attempt is None else attempt
        record = StepRecord(step, 0 if evaluation else self._advance(step, count_one, attempt), clock.now_ns(),
                            evaluation=evaluation, attempt=attempt)
        clean = False
        try:
            yield Step(record, self.settings.run_id)
            clean = True
        except BaseException as exc:
            record.error = error_of(exc)
            record.skipped = True
            raise
        finally:
            group = self._selection_group()
            if group is not None:  # rank 0's verdict decides every rank's rows: judged here
                run_deferred(record, self.settings.run_id)
                record.keep_reason, record.judged = self._judge(record.scalars, record.skipped), True
                if clean and gather:
                    self._select_across_ranks(record, group)  # every rank's rows compete
            record.end_ns = clock.now_ns()
            if not self._closed:
                with _preemption.deferred():  # the sink's locks: a SIGTERM here ends the run after it
                    self._sink.submit(record)
            elif not self._warned_closed:  # a script that goes on after finish(): its steps go nowhere
                self._warned_closed = True
                logger.warning("otel-grpo: step %d came after this Telemetry's finish() or shutdown(); it and "
                               "later steps are neither exported nor spilled (make a new Telemetry)", step)

    def _join_ranks(self) -> None:
        """Once the job's process group is up (as this Telemetry is made, else as a step begins): this rank's host
        and pid go to the job's store, where its end will go (`_rank_ends`)."""
        group = current_group()
        if group is not None:
            self._rank_ends, self._joined = RankEnds.join(self.settings.run_id, group), True

    def _preempted_unless_fallen(self) -> bool:
        """A stop that ends the run as preempted (a SIGTERM): so it does, unless another rank of the job ended on its
        own before it (`RankEnds.fallen`), when the stop is the launcher's after a crash and the run ends as one."""
        fallen = [] if self._rank_ends is None else self._rank_ends.fallen()
        if fallen and self.exporting:
            logger.warning("otel-grpo: SIGTERM after %s of run %r ended on its own (a launcher then stops the other "
                           "ranks): ending the run as crashed, not as preempted", ", ".join(
                               f"rank {rank} ({how})" for rank, how in fallen), self.settings.run_id)
        elif self.exporting:
            logger.warning("otel-grpo: SIGTERM: ending run %r as preempted (grpo.run.preempted = 1) before the "
                           "process exits", self.settings.run_id)
        return not fallen

    def _selection_group(self) -> ProcessGroup | None:
        """The processes a step's rows are selected across (on the training thread, with rank 0's verdict):
        global selection with several processes; None: the backend judges and selects each step."""
        # every rank has the same settings: all take the collectives, or skip them, together
        if self.settings.sample_reduce != "global" or not self.settings.samples_per_step:
            return None
        return current_group()

    def _select_across_ranks(self, record: StepRecord, group: ProcessGroup) -> None:
        """`record.picked`: the step's kept rows of every rank on rank 0, [] on the others; `record.pool`: how many
        rows every rank handed."""
        try:
            kept, record.pool = select_across_ranks(record.rows, self.settings, self._select_rng, group,
                                                    record.keep_reason, self._budget)
            record.picked = [] if kept is None else kept  # only rank 0 emits them, even when every rank exports
        except Exception:  # telemetry never stops training; the rows of this step are lost, said once
            if not self._warned_exchange:
                self._warned_exchange = True
                logger.warning("otel-grpo: selecting samples across ranks failed; this step's samples are lost",
                               exc_info=True)
            record.picked = []

    def log_metrics(self, step: int, metrics: Mapping[str, Any], *, source: str | None = None,
                    evaluation: bool = False) -> None:
        """Record a metrics dict outside a `step()` block; TRL, verl or MaxEnt names map through the catalog.

        `source` ("trl", "verl", "maxent"): whose names `metrics` uses, where a peer's name means
        another signal than our key of that name (`log_metrics(s, {"kl": x}, source="trl")` is
        TRL's bias-corrected `grpo.trl.kl`; without a source `kl` is the plain k3 `grpo.kl`). With
        `source="trl"` a training step's numbers also go out exactly as given, `grpo.trl.logged{metric=<key>}`,
        as `instrument` and `follow --trl-output` export TRL's logs (`catalog.peer_scalars`); a None is NaN.
        `evaluation`: the values of an evaluation (one before training included), not of a training
        step: exported at `step`, but they count no step and do not move `grpo.step_index`, so the
        step count stays the trainer's and a run that hangs after such an evaluation, before its
        first step, still shows no first step (GRPONoFirstStep). Its value of a training statistic is the
        evaluation's, never the training series': `reward` goes out as `eval_reward` does, `grpo.eval{metric="reward"}`
        (`catalog.evaluation_key`); the trainer's state (`epoch`) stays on its own gauge.
        """
        metrics = checked_mapping(metrics, "metrics")
        # a peer's dict through the catalog's one mapping, that of the TRL callbacks and `follow`: TRL's as logged too
        named = metrics if source is None else peer_scalars(metrics, source, evaluation=evaluation)
        with self._open(step, count_one=False, evaluation=evaluation) as s:
            s.record(named)

    def heartbeat(self) -> None:
        """Say that the process works between steps (call it per evaluation batch, per shard of a long
        save): the stall alerts (GRPOTrainerStalled, GRPONoFirstStep) count from the later of the last heartbeat
        and the last step, so a long evaluation is not taken for a hang, while one stuck inside a batch
        still is. Cheap enough for every batch: at most one per second reaches the sink (the alerts work
        in minutes). Call it from the loop's own thread, or let `beat_while_writing` call it on a change
        on disk: a thread that beats on a timer would hide a hang."""
        now = time.monotonic()
        if now - self._last_beat < _HEARTBEAT_EVERY_S or self._closed:
            return
        self._last_beat = now
        with _preemption.deferred():
            self._sink.submit(Heartbeat(clock.now_ns()))

    def beat_while_writing(self, path: str | os.PathLike[str], every_s: float | None = None) -> WriteBeats:
        """A context manager for work that writes files, such as a checkpoint save: while its block runs, a
        heartbeat goes out whenever what `path` holds (the folder the save writes into, or the one
        above it; or the one file it writes) changed since the last look, every `every_s` seconds
        (default 5). A save that writes for an hour is work to the stall alerts; one that hangs writes
        nothing, gets no beat and pages as a stall would (`_writes` says what a look reads).

            with tel.beat_while_writing(f"runs/exp-42/checkpoint-{step}"):
                save_checkpoint(model, optimizer, step)

        `path` need not exist yet; a rank that does not export watches nothing."""
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"path: expected a folder's path (str or os.PathLike), got {type(path).__name__}")
        if every_s is not None:
            every_s = checked_seconds(every_s, "every_s", positive=True)
        return WriteBeats(self.heartbeat if self.exporting else None, path, every_s)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Emit everything recorded so far and push it to the exporters, waiting at most `timeout_s` seconds
        (default `shutdown_timeout_s`); False on timeout."""
        timeout_s = self.settings.shutdown_timeout_s if timeout_s is None else checked_seconds(timeout_s, "timeout_s")
        return self._sink.flush(timeout_s)

    @property
    def prometheus_port(self) -> int | None:
        """Port of the `/metrics` endpoint this run serves (resolved when 0 was asked for); None: none."""
        return self._sink.prometheus_port

    @property
    def export_health(self) -> ExportHealth:
        """Export failures of the exporters in this process (a child process's are its own)."""
        return self._sink.export_health

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        """Leaving `with Telemetry(...) as tel:` ends the run: `finish()` when the block completes, is stopped
        by the user (Ctrl-C) or exits the program successfully (`sys.exit()`, `sys.exit(0)`), `shutdown()` when
        another exception escapes it (a crash, to the alerts); the exception propagates."""
        if exc_type is None or issubclass(exc_type, KeyboardInterrupt) or (
                issubclass(exc_type, SystemExit) and getattr(exc, "code", None) in (None, 0)):
            self.finish()
        else:
            self.shutdown()

    def finish(self) -> None:
        """The run ended on purpose (completed, or stopped by the user): `grpo.run.finished` = 1, then `shutdown`.

        Alerts tell a finished run from one that stopped exporting (a crash) by this
        gauge, so call it on every deliberate end and never on an error path. A closed
        Telemetry stays closed: steps recorded after it go nowhere (one warning says so). A
        process that exits with the run open ends it unfinished (the exit hook), with a
        warning when no exception ended the process (a forgotten `finish()`).
        """
        self.shutdown(finished=True)

    def shutdown(self, finished: bool = False, preempted: bool = False) -> None:
        """Emit what is queued (the spill is complete after this), flush, close; bounded by
        `shutdown_timeout_s`, plus up to `prometheus_linger_s` for an ended run whose end has not reached
        Prometheus yet (the pull endpoint not scraped since, the OTLP metrics endpoint down).

        `finished=True` is `finish()`. The exit hook calls this with False: a process
        that exits without finishing its run did not end it on purpose. `preempted=True`:
        a scheduler stopped the run (SIGTERM) to resume it later, `grpo.run.preempted` = 1, unless another rank of
        the job ended on its own before (it raised, or was killed: `_rank_ends`), when the stop is a launcher's after
        a crash and the run ends as crashed. While the
        run is open, a SIGTERM that nothing else in the program handles does this by itself and then
        lets the signal end the process as it would have (`_preemption`). Called from a signal handler of the
        program's own while the training thread was handing a step over, it runs once the hand-over is done.
        """
        if _preemption.defer(lambda: self.shutdown(finished, preempted)):  # it holds locks taken below
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._at_exit)
        _preemption.unwatch(self)
        if self._rank_ends is not None:  # first: the launcher stops the other ranks once this process exits
            self._rank_ends.record("finished" if finished else "preempted" if preempted else "stopped")
        if preempted and not finished:
            preempted = self._preempted_unless_fallen()
        self._sink.close(self.settings.shutdown_timeout_s, finished=finished, preempted=preempted)
