"""Trainer callbacks: the log-dict path (`OtelGrpoCallback`) and the logged-step flush of `instrument`."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from ...catalog import is_evaluation, is_train_summary
from ...telemetry import Telemetry
from ._accumulate import Accumulator
from ._keys import map_logs
from ._logged import record_logged
from ._settings import TrlSettings

if TYPE_CHECKING:
    from ...telemetry._writes import WriteBeats

logger = logging.getLogger("otel_grpo.integrations.trl")


class _ReportsProgress(TrainerCallback):
    """Progress the hang alerts must see between logged steps.

    A training's first optimizer step (a resumed one's too) reaches the step index at once, even where the
    trainer logs only every `logging_steps` steps (transformers' default 500, TRL's 10): the alerts tell a run
    that hangs before its first step by it (GRPONoFirstStep). Only the index: the values stay with the logged
    step, which covers every step since the last log as the trainer's own do. Its `log_interval` is the time
    to the first log at that step's pace (its duration times the steps between logs), so the stall alert
    waits for that log, not for one more step. Each evaluation batch is a heartbeat: an evaluation (during
    training, `eval_on_start` before it) longer than the stall limit is work, not a hang. So is a checkpoint
    save that writes: from the end of a step the trainer will save after until the save ends, each change
    in `output_dir` found by a look every few seconds is a heartbeat (`Telemetry.beat_while_writing`);
    a save that hangs writes nothing and pages as a stall."""

    telemetry: Telemetry | None
    _stepped = False
    _began = 0.0
    _saving: WriteBeats | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._stepped, self._began = False, time.perf_counter()
        if self.telemetry is not None:  # a train() again in this process (a resume after a failed one) re-runs steps
            self.telemetry.new_attempt()

    def on_step_begin(self, args, state, control, **kwargs):
        self._saved()
        if not self._stepped:
            self._began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        # transformers' flow callback runs first: should_log says the trainer logs this step itself
        if not self._stepped:
            self._stepped = True
            if not control.should_log and self.telemetry is not None:
                every = state.logging_steps if args.logging_strategy == "steps" else state.max_steps
                interval = (time.perf_counter() - self._began) * max(every, 1)
                self.telemetry.log_metrics(state.global_step, {"log_interval": interval})
        self._saving_after(args, control)

    def on_epoch_end(self, args, state, control, **kwargs):
        self._saving_after(args, control)

    def on_save(self, args, state, control, **kwargs):
        self._saved()

    def on_train_end(self, args, state, control, **kwargs):
        self._saved()

    def on_prediction_step(self, args, state, control, **kwargs):
        if self.telemetry is not None:
            self.telemetry.heartbeat()

    def _saving_after(self, args: Any, control: Any) -> None:
        """The trainer saves after this step or epoch (with `save_strategy="best"`, perhaps: after the
        evaluation it is about to run): watch the output dir until the save ends."""
        saves = control.should_save or (control.should_evaluate and args.save_strategy == "best")
        if saves and self.telemetry is not None and self._saving is None and args.output_dir:
            self._saving = self.telemetry.beat_while_writing(args.output_dir)
            self._saving.start()

    def _saved(self) -> None:
        if self._saving is not None:
            self._saving.stop()
            self._saving = None


class OtelGrpoCallback(_ReportsProgress):
    """Exports what any `transformers.Trainer` logs: `Trainer(..., callbacks=[OtelGrpoCallback()])`.

    TRL and transformers keys map to catalog signals (TRL's names first: its `kl` is
    `grpo.trl.kl`), `eval_<name>` to `grpo.eval{metric="<name>"}`, None and NaN to
    `grpo.nonfinite`, anything else to `grpo.extra.<key>`; every finite number of a training log also goes
    out as logged, `grpo.trl.logged{metric="<key>"}`; the first optimizer step's index goes out at
    once, whatever `logging_steps` is, and each evaluation batch is a heartbeat, as is each change in
    `output_dir` while a checkpoint save runs. `telemetry`: the one to
    export through; None builds one from the environment with `settings` (run id and output dir default
    from the trainer's `args`), finished at train end, and again for an `evaluate()` outside training
    (the final evaluation), finished when it ends.
    """

    def __init__(self, telemetry: Telemetry | None = None, **settings: Any) -> None:
        self.telemetry = telemetry
        self._settings = settings
        self._owned = telemetry is None
        self._training = False

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        self._training = True
        self._open(args)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._open(args)
        logs = as_logged(state, logs)
        self.telemetry.log_metrics(state.global_step, map_logs(logs), evaluation=is_evaluation(logs))

    def on_evaluate(self, args, state, control, **kwargs):
        if not self._training:  # after its metrics' on_log: an evaluation of its own ends here
            self._end()

    def on_train_end(self, args, state, control, **kwargs):
        super().on_train_end(args, state, control, **kwargs)
        self._training = False
        self._end()

    def _open(self, args: Any) -> None:
        """Ours, built on first use and again once a train() or an evaluate() has finished it."""
        if self.telemetry is None or (self._owned and self.telemetry.closed):
            self.telemetry = telemetry_for(args, **self._settings)

    def _end(self) -> None:
        if self._owned and self.telemetry is not None:
            self.telemetry.finish()


def as_logged(state: Any, logs: dict | None) -> dict:
    """What the trainer logged at this `on_log`: the entry transformers' `Trainer.log` appended to the log history
    just before it (what `trainer_state.json` holds), less its `step`; `logs` itself where the history holds no
    such entry (a caller of its own). Callbacks before ours may change `logs` (transformers' printer pops
    `total_flos`); the history keeps every key as logged."""
    logs = logs or {}
    history = getattr(state, "log_history", None)
    if history:
        entry = history[-1]
        if isinstance(entry, dict) and entry.get("step") == state.global_step and logs.keys() <= entry.keys():
            return {k: v for k, v in entry.items() if k != "step"}
    return logs


def telemetry_for(args: Any, defaults: dict[str, Any] | None = None, **settings: Any) -> Telemetry:
    """A Telemetry from `settings`, then the environment (`OTEL_GRPO_RUN_ID`, ...), then `defaults` and the
    trainer's `args` (run id: `run_name`, else the output dir's name; output dir)."""
    from pathlib import Path

    out = getattr(args, "output_dir", None)
    name = Path(out).resolve().name if out else None  # the directory's own name, for "." or "runs/exp/" too
    derived = {"run_id": getattr(args, "run_name", None) or name or None, "output_dir": out}
    return Telemetry.from_env(defaults={**derived, **(defaults or {})}, **settings)


class InstrumentedCallback(_ReportsProgress):
    """`instrument`'s: at each logged step, reduce the accumulated tensors' stats and export them with TRL's logs.

    `capture`: the `Capture` feeding `acc` (its `enabled` flag, its `accelerator` for the collectives).
    """

    def __init__(self, settings: TrlSettings, telemetry: Telemetry, acc: Accumulator, capture: Any) -> None:
        self.settings, self.telemetry, self.acc, self.capture = settings, telemetry, acc, capture
        self._last: tuple[float, float | None] = (time.perf_counter(), None)  # (time, tokens seen) at the last log
        self._flushed_step: int | None = None
        self._all_off = False  # every rank's capture is off: no agreement needed any more

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = as_logged(state, logs)
        evaluation = is_evaluation(logs)
        if is_train_summary(logs) or evaluation:  # host values only: no collective
            self.telemetry.log_metrics(state.global_step, map_logs(logs), evaluation=evaluation)
            return
        self.flush(state, logs, final=state.global_step >= state.max_steps)

    def on_train_end(self, args, state, control, **kwargs):
        super().on_train_end(args, state, control, **kwargs)
        # steps after the last logged one; decided by the step, the same on every rank (flush is collective)
        if state.global_step != self._flushed_step and (self.acc.pending or not self._all_off):
            self.flush(state, {}, final=True)

    def flush(self, state: Any, logs: dict, final: bool = False) -> None:
        """One logged step: every rank reduces (a collective); rank 0's Telemetry exports. `final`: training
        ends here, so sample rows still waiting for their loss pass go out too."""
        step = state.global_step
        self._flushed_step = step
        logged = None
        merged = self._merged(final)
        accelerator = self.capture.accelerator
        if self._all_off:
            pass
        elif every_rank(merged is not None, accelerator):
            try:
                logged = self.acc.take(merged, accelerator)
            except Exception:  # on every rank alike: the reduction's data checks see the same gathered values
                self.capture.enabled = False
                logger.warning("otel-grpo: reducing TRL's stats failed; exporting TRL's logged values only",
                               exc_info=True)
        else:
            self.acc.clear()
            self._all_off = True
            if self.capture.enabled:  # another rank's capture failed: all stop together, collectives stay in step
                self.capture.enabled = False
                logger.warning("otel-grpo: capturing TRL's tensors failed on another rank; TRL signals from "
                               "tensors are off for this run (logged values still export)")
        host = self._host_scalars(step, state)
        # A logged step covers logging_steps steps; every rank is here (the reduction above is
        # collective), so every rank's rows compete in the step's sample selection.
        with self.telemetry.logged_step(step) as s:
            if logged is not None:  # finished and recorded off the training thread
                s.defer(record_logged, logged, logs, host)
            else:
                s.record(map_logs(logs), **host)

    def _merged(self, final: bool) -> Any:
        """This rank's stats since the last logged step; None when its capture is off or merging fails."""
        if not self.capture.enabled:
            return None
        try:
            return self.acc.merged(final)
        except Exception:
            self.capture.enabled = False
            logger.warning("otel-grpo: merging TRL's stats failed; exporting TRL's logged values only", exc_info=True)
            return None

    def _host_scalars(self, step: int, state: Any) -> dict[str, float]:
        """Step, beta, tokens seen (TRL logs `num_tokens` only on generation steps) and throughput since the last log."""
        now, tokens = time.perf_counter(), float(state.num_input_tokens_seen)
        then, before = self._last
        self._last = (now, tokens)
        out = {"step": float(step), "beta": self.settings.beta, "num_tokens": tokens}
        if before is not None and now > then:
            out["tokens_per_second"] = (tokens - before) / (now - then)
        return out


def every_rank(ok: bool, accelerator: Any) -> bool:
    """Whether `ok` holds on every rank: one tiny all-reduce (MIN) with several processes, so that
    a capture that failed on one rank stops the reduction on all of them, never on that one only
    (the others would wait in its collective forever)."""
    world = getattr(accelerator, "num_processes", 1)
    if world <= 1:
        return ok
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if ok else 0.0], device=accelerator.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
