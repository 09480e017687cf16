"""Wrappers around a GRPOTrainer's own methods (on the instance) that hand its tensors to the accumulator.

Each wrapper calls TRL's method unchanged and then reads what it took or returned;
a failure in our part disables the capture with one warning and never reaches
training. Nothing here reads a device value on the host, and the stats of what is
captured are computed at the logged step (`Accumulator`).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable

import torch

from ... import signals
from ._accumulate import Accumulator
from ._generation import Captured, capture_generation
from ._micro_batch import capture_micro_batch

logger = logging.getLogger("otel_grpo.integrations.trl")


class Hooks:
    """Installs the wrappers on `trainer`; `acc` receives stats, sample batches and phase timings."""

    def __init__(self, trainer: Any, acc: Accumulator) -> None:
        self.trainer, self.acc = trainer, acc
        self.enabled = True
        self._captured: Captured | None = None
        self._loss_logps: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._generation_s = 0.0  # generation time inside the current training_step

    def install(self) -> None:
        t = self.trainer
        self._wrap("_generate", self._timed("rollout"))
        self._wrap("_calculate_rewards", self._rewards)
        self._wrap("_get_per_token_logps_and_entropies", self._logps)
        self._wrap("_generate_and_score_completions", self._generation)
        self._wrap("_compute_loss", self._loss)
        self._wrap("training_step", self._training_step)
        t.reward_funcs = [self._timed_reward(f, n) for f, n in zip(t.reward_funcs, t.reward_func_names)]

    # ---- plumbing ---------------------------------------------------------------------
    def _wrap(self, name: str, hook: Callable[..., Any]) -> None:
        original = getattr(self.trainer, name)
        setattr(self.trainer, name, functools.wraps(original)(functools.partial(hook, original)))

    def _guard(self, what: str, fn: Callable[[], None]) -> None:
        """Run our part; on error, stop capturing (one warning) and let training go on."""
        if not self.enabled:
            return
        try:
            fn()
        except Exception:
            self.enabled = False
            logger.warning("otel-grpo: capturing TRL's %s failed; TRL signals from tensors are off for this run "
                           "(logged values still export)", what, exc_info=True)

    def _training(self) -> bool:
        return bool(self.trainer.model.training)

    def _timed(self, phase: str) -> Callable[..., Any]:
        def hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            result = original(*args, **kwargs)
            if self._training():
                self.acc.phase(phase, time.perf_counter() - t0)
            return result
        return hook

    def _timed_reward(self, func: Any, name: str) -> Any:
        """Plain callables only: TRL dispatches on nn.Module and coroutine functions (timed as `reward`)."""
        import inspect

        if isinstance(func, torch.nn.Module) or inspect.iscoroutinefunction(func) or not callable(func):
            return func

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            result = func(*args, **kwargs)
            if self._training():
                self.acc.phase(f"reward.{name}", time.perf_counter() - t0)
            return result
        return timed

    # ---- hooks ------------------------------------------------------------------------
    def _rewards(self, original, inputs, prompts, completions, completion_ids_list, *args, **kwargs):
        t0 = time.perf_counter()
        rewards = original(inputs, prompts, completions, completion_ids_list, *args, **kwargs)
        seconds = time.perf_counter() - t0

        def capture() -> None:
            self.acc.phase("reward", seconds)
            self._captured = Captured(list(prompts), list(completions), [list(c) for c in completion_ids_list],
                                      rewards.detach())
        if self._training():
            self._guard("rewards", capture)
        return rewards

    def _logps(self, original, model, *args, **kwargs):
        t0 = time.perf_counter()
        result = original(model, *args, **kwargs)
        seconds = time.perf_counter() - t0

        def capture() -> None:
            logps, entropies, _ = result
            if kwargs.get("compute_entropy"):  # the loss's forward pass: read by _loss
                self._loss_logps = (logps.detach(), None if entropies is None else entropies.detach())
            elif self._training():
                ref = model is getattr(self.trainer, "ref_model", None)
                self.acc.phase("reference" if ref else "old_logprobs", seconds)
        self._guard("log-probs", capture)
        return result

    def _generation(self, original, inputs, *args, **kwargs):
        t0 = time.perf_counter()
        out = original(inputs, *args, **kwargs)
        self._generation_s += time.perf_counter() - t0
        captured, self._captured = self._captured, None
        if self._training() and captured is not None:
            self._guard("generation batch", lambda: self._add_generation(out, captured))
        return out

    def _add_generation(self, out: dict, captured: Captured) -> None:
        generation, batch = capture_generation(self.trainer, out, captured)
        self.acc.capture(generation)
        self.acc.batches.append(batch)

    def _loss(self, original, model, inputs, *args, **kwargs):
        self._loss_logps = None
        loss = original(model, inputs, *args, **kwargs)
        captured, self._loss_logps = self._loss_logps, None
        if self._training() and captured is not None:
            self._guard("loss", lambda: self.acc.capture(capture_micro_batch(self.trainer, inputs, *captured)))
        return loss

    def _training_step(self, original, model, inputs, *args, **kwargs):
        t0 = time.perf_counter()
        self._generation_s = 0.0
        loss = original(model, inputs, *args, **kwargs)
        seconds = max(time.perf_counter() - t0 - self._generation_s, 0.0)

        def add_loss() -> None:
            self.acc.phase("update", seconds)
            st = signals.Stats()
            # transformers logs sum(training_step losses) / optimizer steps, averaged over ranks
            st.add_mean("loss", loss.detach() * self.trainer.current_gradient_accumulation_steps, 1.0)
            self.acc.add(st)
        self._guard("loss", add_loss)
        return loss

