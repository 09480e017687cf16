"""`instrument(trainer)`: one line after constructing a TRL GRPOTrainer."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

from ...telemetry import Telemetry
from ._accumulate import Accumulator
from ._callback import InstrumentedCallback, OtelGrpoCallback, telemetry_for
from ._capture import Capture, model_name, snapshot
from ._compat import unsupported

logger = logging.getLogger("otel_grpo.integrations.trl")
_BOUND = "_otel_grpo_instrumented"  # the trainer attribute holding its `_Binding`


@dataclass(slots=True)
class _Binding:
    """What `instrument` attached to one trainer (kept on it): one callback, the telemetry it exports to."""

    telemetry: Telemetry
    owned: bool
    """Built by `instrument` (rebuilt for a later `train()` or `evaluate()`), not passed by the caller."""
    settings: dict[str, Any]
    callback: Any
    training: bool = False
    """Inside `train()`: an `evaluate()` there (`eval_strategy`) is part of the training run."""

    def use(self, telemetry: Telemetry, owned: bool, settings: dict[str, Any]) -> None:
        if self.owned and self.telemetry is not telemetry:
            self.telemetry.shutdown()  # ours, replaced: nothing will export through it again
        self.telemetry, self.owned, self.settings = telemetry, owned, settings
        self.callback.telemetry = telemetry

    def before(self, trainer: Any, call: str) -> None:
        """A `train()` or `evaluate()` after one that closed the telemetry (a notebook re-run, a resume after
        Ctrl-C, the evaluation after training): ours is built again, yours cannot be reopened."""
        if not self.telemetry.closed:
            return
        if self.owned:
            self.use(_owned_telemetry(trainer, self.settings), True, self.settings)
        else:
            logger.warning("otel-grpo: the Telemetry given to instrument() was closed by an earlier train() or "
                           "evaluate(), so this %s() exports nothing; call instrument(trainer) again (with a new "
                           "Telemetry or none) before it", call)
            self.callback.telemetry = Telemetry.disabled()  # said here: the closed one would say it again per run


def instrument(trainer: Any, telemetry: Telemetry | None = None, **settings: Any) -> Telemetry:
    """Export every GRPO signal, the samples and the phases of `trainer` (a `trl.GRPOTrainer` or subclass).

        trainer = GRPOTrainer(...)
        instrument(trainer)          # or instrument(trainer, top_k=8, model_name="qwen-0.5b")
        trainer.train()

    Args:
        trainer: the constructed trainer; its methods are wrapped on the instance.
        telemetry: the Telemetry to export through; None builds one from the
            environment (`OTEL_GRPO_*`, `OTEL_*`) and `settings`; where neither gives
            them, the run id is `args.run_name` (else the output dir's name), the
            output dir `args.output_dir`, the model name the model's `_name_or_path`,
            and it emits from a child process (`emit_in="process"`).
        settings: `TelemetrySettings` fields.

    The returned Telemetry is owned by the run: `train()` finishes it when it returns
    or is interrupted (Ctrl-C: `grpo.run.finished` = 1) and shuts it down without
    finishing when it raises; a SIGTERM (a scheduler's preemption) ends it as preempted
    before the process dies of it, unless the program handles SIGTERM itself. An
    `evaluate()` outside `train()` (the evaluation after training) exports its metrics
    the same way, as a run of its own process. A later `train()` or `evaluate()` builds
    a new Telemetry the same way (one you passed cannot be reopened: that call warns
    and exports nothing; one you passed is left open by an `evaluate()` before training).
    Calling `instrument` again on the same trainer replaces the telemetry and adds no
    second callback. With a TRL outside `SUPPORTED_TRL`, or a trainer that lacks a
    member the hooks need, one warning is logged and only the logged values are
    exported (`OtelGrpoCallback`). Never raises because of telemetry; a `trainer` that is no
    transformers Trainer, or a `telemetry` that is no Telemetry, is a `ValueError` naming it.
    """
    if not all(hasattr(trainer, member) for member in ("args", "model", "add_callback")):
        raise ValueError(f"trainer: expected a constructed TRL GRPOTrainer (or subclass), got {type(trainer).__name__}")
    if telemetry is not None and not isinstance(telemetry, Telemetry):
        raise ValueError(f"telemetry: expected an otel_grpo Telemetry or None, got {type(telemetry).__name__}")
    owned = telemetry is None
    if telemetry is None:
        telemetry = _owned_telemetry(trainer, settings)
    bound = getattr(trainer, _BOUND, None)
    if isinstance(bound, _Binding):  # instrumented already: hooks and callback stay, the telemetry is replaced
        bound.use(telemetry, owned, settings)
        return telemetry
    reason = unsupported(trainer)
    trl_settings = None
    if reason is None:
        try:
            trl_settings = snapshot(trainer)
        except Exception as exc:  # a member that passed the check holds what we cannot read
            reason = f"reading {type(trainer).__name__}'s settings failed ({exc})"
    callback: Any = None
    if trl_settings is not None:
        acc = Accumulator(trl_settings)
        capture = Capture(trainer, trl_settings, acc)
        try:
            capture.install()
        except Exception as exc:  # a member that passed the check but cannot be wrapped
            capture.enabled = False
            reason = f"wrapping {type(trainer).__name__} failed ({exc})"
        else:
            callback = InstrumentedCallback(trl_settings, telemetry, acc, capture)
    if reason is not None:
        logger.warning("otel-grpo: %s; exporting TRL's logged values only", reason)
        callback = OtelGrpoCallback(telemetry)
    trainer.add_callback(callback)
    binding = _Binding(telemetry, owned, settings, callback)
    setattr(trainer, _BOUND, binding)
    _own_lifecycle(trainer, binding)
    return telemetry


def _owned_telemetry(trainer: Any, settings: dict[str, Any]) -> Telemetry:
    """The Telemetry `instrument` builds: `settings`, then the environment, then the trainer's defaults."""
    # A TRL step is Python-bound between its torch ops: the emitter's and exporters' GIL time
    # would be paid by training (benchmarks/README.md, trl: thread against process).
    return telemetry_for(trainer.args, {"model_name": model_name(trainer), "emit_in": "process"}, **settings)


def _own_lifecycle(trainer: Any, binding: _Binding) -> None:
    """`train()`, and `evaluate()` outside it, each end the run they export: finished on return or Ctrl-C,
    shut down unfinished when they raise."""
    original_train, original_evaluate = trainer.train, trainer.evaluate

    @functools.wraps(original_train)
    def train(*args: Any, **kwargs: Any) -> Any:
        binding.before(trainer, "train")
        binding.training = True
        try:
            with binding.telemetry:
                return original_train(*args, **kwargs)
        finally:
            binding.training = False

    @functools.wraps(original_evaluate)
    def evaluate(*args: Any, **kwargs: Any) -> Any:
        if binding.training:  # `eval_strategy`: part of the training run, which stays open
            return original_evaluate(*args, **kwargs)
        binding.before(trainer, "evaluate")
        if not binding.owned:  # yours: left open for you, or a later train(), to end
            return original_evaluate(*args, **kwargs)
        with binding.telemetry:
            return original_evaluate(*args, **kwargs)

    trainer.train, trainer.evaluate = train, evaluate
