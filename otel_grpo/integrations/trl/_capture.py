"""The one module that reads a GRPOTrainer: its settings once (`snapshot`), its tensors as it runs (`Capture`).

    settings = snapshot(trainer)             # TrlSettings: frozen, read once
    capture = Capture(trainer, settings, Accumulator(settings))
    capture.install()                        # wraps TRL's own methods on the instance

Every trainer attribute, GRPOConfig field, wrapped method and TRL dict key the
integration relies on is read here and listed below (`_compat` checks them against
the installed TRL); the stats (`_generation`, `_micro_batch`, `_diagnostics`) take plain
tensors and `TrlSettings`. Each wrapper calls TRL's method unchanged and then reads what
it took or returned; a failure in our part disables the capture with one warning and
never reaches training. Nothing here reads a device value on the host (but TRL's tool
masks' lengths, which TRL counts the same way), and the stats of what is captured are
computed at the logged step (`Accumulator`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time
from typing import Any, Callable

import torch

from ._accumulate import Accumulator
from ._generation import Captured, Generation, SampleBatch, truncated_flags
from ._micro_batch import MicroBatch
from ._settings import TrlSettings, fn_name

logger = logging.getLogger("otel_grpo.integrations.trl")

WRAPPED = {  # method -> the leading parameters the wrapper passes by name or position
    "_generate": ("prompts",),
    "_calculate_rewards": ("inputs", "prompts", "completions", "completion_ids_list"),
    "_get_per_token_logps_and_entropies": ("model", "input_ids", "attention_mask", "logits_to_keep",
                                           "compute_entropy"),
    "_generate_and_score_completions": ("inputs",),
    "_compute_loss": ("model", "inputs"),
    "training_step": ("model", "inputs"),
}
ATTRIBUTES = (  # trainer attributes read (the settings once, the rest as training runs; and
    # `current_gradient_accumulation_steps`, which transformers sets only inside `train()`)
    "accelerator", "args", "state", "model", "reward_funcs", "reward_func_names", "reward_weights",
    "num_generations", "beta", "epsilon_low", "epsilon_high", "eos_token_ids", "processing_class", "loss_type",
    "importance_sampling_level", "max_completion_length",
)
CONFIG_FIELDS = ("use_bias_correction_kl", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
                 "vllm_importance_sampling_clip_max")
KEYS = {  # TRL-private dict keys read, by the method whose source holds them
    "_generate_and_score_completions": ("completion_ids", "completion_mask", "advantages", "old_per_token_logps",
                                        "ref_per_token_logps", "sampling_per_token_logps",
                                        "importance_sampling_ratio", "tool_mask"),
    "_compute_loss": ("completion_mask", "advantages", "old_per_token_logps", "ref_per_token_logps", "tool_mask"),
}
ROW_KEY = "otel_grpo_row"
"""Added to a generation batch: each row's position, which TRL's shuffle and split carry to the micro-batches."""
_IS_MODES = {  # TRL's vllm_importance_sampling_mode -> (level, mode) of signals.rollout_correction
    "token_truncate": ("token", "truncate"), "token_mask": ("token", "mask"),
    "sequence_truncate": ("sequence", "truncate"), "sequence_mask": ("sequence", "mask"),
}


def snapshot(trainer: Any) -> TrlSettings:
    """The settings the stats need, read from `trainer` and its GRPOConfig once."""
    args = trainer.args
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)  # a processor's
    level, mode = _IS_MODES.get(getattr(args, "vllm_importance_sampling_mode", ""), ("token", "truncate"))
    stop = {*trainer.eos_token_ids, tokenizer.pad_token_id} - {None}
    return TrlSettings(
        reward_names=tuple(fn_name(n) for n in trainer.reward_func_names),
        reward_weights=tuple(float(w) for w in trainer.reward_weights.tolist()),  # a CPU tensor: no device read
        num_generations=int(trainer.num_generations), epsilon_low=float(trainer.epsilon_low),
        epsilon_high=float(trainer.epsilon_high), beta=float(trainer.beta), stop_ids=frozenset(stop),
        rank=int(trainer.accelerator.process_index), world=int(trainer.accelerator.num_processes),
        loss_type=str(getattr(trainer, "loss_type", "grpo")),
        importance_sampling_level=str(getattr(trainer, "importance_sampling_level", "token")),
        use_bias_correction_kl=bool(getattr(args, "use_bias_correction_kl", False)),
        max_completion_length=int(getattr(trainer, "max_completion_length", 0) or 0),
        is_level=level, is_mode=mode,
        is_threshold=(getattr(args, "vllm_importance_sampling_clip_min", None) or 0.0,
                      getattr(args, "vllm_importance_sampling_clip_max", None) or math.inf),
        model_name=model_name(trainer),
    )


def model_name(trainer: Any) -> str | None:
    """The model's `_name_or_path` (telemetry's `model_name` default), for any transformers Trainer."""
    return getattr(getattr(trainer.model, "config", None), "_name_or_path", None)


@functools.lru_cache(maxsize=16)
def _positions(batch: int, device: torch.device) -> torch.Tensor:
    """0 .. batch - 1 (the same every generation: TRL's shuffle and split make new tensors of it)."""
    return torch.arange(batch, device=device)


def _mask(d: dict) -> torch.Tensor:
    """Completion tokens as TRL's loss masks them (model-generated only, with tools)."""
    return d["completion_mask"] if "tool_mask" not in d else d["completion_mask"] * d["tool_mask"]


class Capture:
    """Installs the wrappers on `trainer`; `acc` receives stats, sample batches and phase timings."""

    def __init__(self, trainer: Any, settings: TrlSettings, acc: Accumulator) -> None:
        self.trainer, self.settings, self.acc = trainer, settings, acc
        self.enabled = True
        self._captured: Captured | None = None
        self._loss_logps: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self._generation_s = 0.0  # generation time inside the current training_step
        self._first_pass = None  # the latest sample batch, until its rows have all been through the loss once
        self._scoring: list[tuple[torch.Tensor, float, int]] = []  # this generation's log-prob passes: (logps, s, end)

    @property
    def accelerator(self) -> Any:
        return self.trainer.accelerator

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
            # references, not copies: TRL builds these lists afresh for each generation and leaves them as they are
            self._captured = Captured(prompts, completions, completion_ids_list, rewards.detach())
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
            elif self._training():  # pi_old's or the reference's: the generation's outputs say which
                self._scoring.append((logps, seconds, time.time_ns()))
        self._guard("log-probs", capture)
        return result

    def _generation(self, original, inputs, *args, **kwargs):
        t0 = time.perf_counter()
        out = original(inputs, *args, **kwargs)
        self._generation_s += time.perf_counter() - t0
        captured, self._captured = self._captured, None
        scoring, self._scoring = self._scoring, []
        if self._training():
            self._guard("log-probs", lambda: self._name_scoring(out, scoring))
            if captured is not None:
                self._guard("generation batch", lambda: self._add_generation(out, captured))
        return out

    def _name_scoring(self, out: dict, scoring: list[tuple[torch.Tensor, float, int]]) -> None:
        """Each log-prob pass of the generation, timed as the tensor it made: the reference's is the batch's
        `ref_per_token_logps` (with a PEFT adapter TRL scores it with the policy model, adapter off)."""
        ref = out.get("ref_per_token_logps")
        for logps, seconds, end_ns in scoring:
            self.acc.phase("reference" if logps is ref else "old_logprobs", seconds, end_ns)

    def _add_generation(self, out: dict, cap: Captured) -> None:
        """References to the batch's tensors for its stats and its sample rows (no device op: the logged
        step computes); marks each row's position for the loss."""
        ids = out["completion_ids"]
        batch = ids.shape[0]
        if "tool_mask" in out:  # TRL counts only model-generated tokens then
            lengths = out["tool_mask"].sum(-1).tolist()  # host sync, with tools only (TRL's own count)
        else:
            lengths = [len(c) for c in cap.completion_ids]
        truncated = truncated_flags(cap.completion_ids, self.settings.stop_ids)
        advantages = out["advantages"]
        gen = Generation(cap.rewards_per_func, advantages, ids, _mask(out), lengths, truncated,
                         out.get("sampling_per_token_logps"), out.get("old_per_token_logps"),
                         out.get("importance_sampling_ratio"))
        rows = SampleBatch(cap, advantages, lengths, truncated, self.settings.rank * batch,
                           int(self.trainer.state.global_step), pending=batch)
        self.acc.capture(gen)
        self.acc.batches.append(rows)
        out[ROW_KEY] = _positions(batch, ids.device)  # shuffled and split with the batch by TRL
        self._first_pass = rows

    def _loss(self, original, model, inputs, *args, **kwargs):
        self._loss_logps = None
        loss = original(model, inputs, *args, **kwargs)
        captured, self._loss_logps = self._loss_logps, None
        if self._training() and captured is not None:
            self._guard("loss", lambda: self._add_micro_batch(inputs, *captured))
        return loss

    def _add_micro_batch(self, inputs: dict, logps: torch.Tensor, entropies: torch.Tensor | None) -> None:
        """What `_compute_loss` used; no device op beyond a tool-mask product. TRL passes over a generation
        batch's chunks in order, so its first `pending` rows through the loss are the first pass."""
        old = inputs.get("old_per_token_logps")
        old = logps if old is None else old  # TRL: pi_old = pi_theta.detach() when it skipped computing it
        ref = inputs.get("ref_per_token_logps") if self.settings.beta != 0.0 else None
        mb = MicroBatch(logps, old, inputs["advantages"], _mask(inputs), ref, entropies,
                        inputs.get("sampling_per_token_logps"))
        target = self._first_pass
        if target is not None:
            if ROW_KEY in inputs:  # else (a subclass dropped it) the rows go out without the loss's numbers
                mb.rows, mb.batch = inputs[ROW_KEY], target
            target.pending -= logps.shape[0]
            if target.pending <= 0:
                self._first_pass = None
        self.acc.capture(mb)

    def _training_step(self, original, model, inputs, *args, **kwargs):
        t0 = time.perf_counter()
        self._generation_s = 0.0
        loss = original(model, inputs, *args, **kwargs)
        seconds = max(time.perf_counter() - t0 - self._generation_s, 0.0)

        def add_loss() -> None:
            self.acc.phase("update", seconds)
            self.acc.loss(loss.detach(), self.trainer.current_gradient_accumulation_steps)
        self._guard("loss", add_loss)
        return loss
