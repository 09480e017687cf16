"""The one module that reads a GRPOTrainer: its settings once (`snapshot`), its tensors as it runs (`Capture`).

    settings = snapshot(trainer)             # TrlSettings: frozen, read once
    capture = Capture(trainer, settings, Accumulator(settings))
    capture.install()                        # wraps TRL's own methods on the instance

Every trainer attribute, GRPOConfig field, wrapped method and TRL dict key the
integration relies on is read here and listed below (`_compat` checks them against
the installed TRL); the stats (`_generation`, `_micro_batch`) take plain
tensors and `TrlSettings`. Each wrapper calls TRL's method unchanged and then reads what
it took or returned; a failure in our part disables the capture with one warning and
never reaches training. Nothing here reads a device value on the host, and the stats of what
is captured are computed at the logged step (`Accumulator`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time
from typing import Any, Callable

import torch

from ...telemetry import _clock as clock
from ._accumulate import Accumulator
from ._generation import Captured, Generation, tool_spans, truncated_flags
from ._generation_rows import SampleBatch
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
CONFIG_FIELDS = ("delta", "use_bias_correction_kl", "vllm_importance_sampling_mode",
                 "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max")
KEYS = {  # TRL-private dict keys read, by the method whose source holds them
    "_generate_and_score_completions": ("completion_ids", "completion_mask", "advantages", "old_per_token_logps",
                                        "ref_per_token_logps", "sampling_per_token_logps",
                                        "importance_sampling_ratio", "tool_mask"),
    "_compute_loss": ("completion_mask", "advantages", "old_per_token_logps", "ref_per_token_logps", "tool_mask"),
}
GENERATE_TOOL_MASK = 2
"""Where TRL's `_generate` returns its tool mask: per row, a host list (1: a token the model wrote, 0: a tool's
answer), or a `rollout_func`'s `env_mask`, which TRL treats as one; None without either. TRL counts the completion
lengths it logs from these lists, before `mask_truncated_completions` zeroes the truncated rows' tensors."""
RETURNS = {"_generate": (GENERATE_TOOL_MASK, "tool_mask")}
"""Values read from a tuple TRL returns, by method: (position, the name TRL returns there)."""
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
    delta = getattr(args, "delta", None)
    return TrlSettings(
        reward_names=tuple(fn_name(n) for n in trainer.reward_func_names),
        reward_weights=tuple(float(w) for w in trainer.reward_weights.tolist()),  # a CPU tensor: no device read
        num_generations=int(trainer.num_generations), epsilon_low=float(trainer.epsilon_low),
        epsilon_high=float(trainer.epsilon_high), delta=None if delta is None else float(delta),
        beta=float(trainer.beta), stop_ids=frozenset(stop),
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


class Capture:
    """Installs the wrappers on `trainer`; `acc` receives stats, sample batches and phase timings.

    The hooks run on the training thread between a step's model passes, with the CPU's caches cold from
    them: there each attribute read and torch call costs several times what it does in a loop
    (benchmarks/README.md, trl_hooks_flush). So a hook checks one flag, keeps references and
    `perf_counter_ns` readings, and does the rest once: each step's phases become wall-clock spans in the
    training-step hook, a generation's scoring passes are named in its hook, and no tensor is touched
    that the logged step can read as well. `training_step` sets the flag: the hooks capture only inside a
    training step (never in an evaluation's), while the capture is on.
    """

    def __init__(self, trainer: Any, settings: TrlSettings, acc: Accumulator) -> None:
        self.trainer, self.settings, self.acc = trainer, settings, acc
        self.enabled = True
        self._stepping = False  # inside a training step, capture on: the hooks capture
        self._captured: Captured | None = None
        self._generated: tuple | None = None  # what `_generate` returned for the current generation batch
        self._loss_logps: tuple | None = None  # the loss pass's (log-probs, entropies, aux), as TRL returned them
        self._generation_ns = 0  # generation time inside the current training_step
        self._first_pass = None  # the latest sample batch, until its rows have all been through the loss once
        self._scoring: list[tuple[torch.Tensor, int, int]] = []  # this generation's log-prob passes: (logps, t0, t1)
        self._timings: list[tuple[str, int, int]] = []  # this step's phases: (name, ns, end on perf_counter_ns)
        self._positions: dict[int, torch.Tensor] = {}  # batch size -> 0 .. size - 1 on the captures' device

    @property
    def accelerator(self) -> Any:
        return self.trainer.accelerator

    def install(self) -> None:
        t = self.trainer
        self._wrap("_generate", self._rollout)
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

    def _fail(self, what: str) -> None:
        """Our part raised: stop capturing (one warning) and let training go on."""
        if self.enabled:
            logger.warning("otel-grpo: capturing TRL's %s failed; TRL signals from tensors are off for this run "
                           "(logged values still export)", what, exc_info=True)
        self.enabled = self._stepping = False

    def _timed_reward(self, func: Any, name: str) -> Any:
        """Plain callables only: TRL dispatches on nn.Module and coroutine functions (timed as `reward`)."""
        if isinstance(func, torch.nn.Module) or inspect.iscoroutinefunction(func) or not callable(func):
            return func
        phase = f"reward.{name}"

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self._stepping:
                return func(*args, **kwargs)
            t0 = time.perf_counter_ns()
            result = func(*args, **kwargs)
            t1 = time.perf_counter_ns()
            self._timings.append((phase, t1 - t0, t1))
            return result
        return timed

    # ---- hooks ------------------------------------------------------------------------
    def _rollout(self, original, *args, **kwargs):
        if not self._stepping:
            return original(*args, **kwargs)
        t0 = time.perf_counter_ns()
        result = original(*args, **kwargs)
        t1 = time.perf_counter_ns()
        self._timings.append(("rollout", t1 - t0, t1))
        self._generated = result  # read (its tool mask) with the generation batch, where a failure is caught
        return result

    def _rewards(self, original, inputs, prompts, completions, completion_ids_list, *args, **kwargs):
        if not self._stepping:
            return original(inputs, prompts, completions, completion_ids_list, *args, **kwargs)
        t0 = time.perf_counter_ns()
        rewards = original(inputs, prompts, completions, completion_ids_list, *args, **kwargs)
        t1 = time.perf_counter_ns()
        self._timings.append(("reward", t1 - t0, t1))
        # references, not copies: TRL builds these lists afresh for each generation and leaves them as they are
        self._captured = Captured(prompts, completions, completion_ids_list, rewards)  # detached at the generation
        return rewards

    def _logps(self, original, model, *args, **kwargs):
        if not self._stepping:
            return original(model, *args, **kwargs)
        t0 = time.perf_counter_ns()
        result = original(model, *args, **kwargs)
        if kwargs.get("compute_entropy"):  # the loss's forward pass: read by _loss
            self._loss_logps = result
        else:  # pi_old's or the reference's: the generation's outputs say which
            self._scoring.append((result, t0, time.perf_counter_ns()))
        return result

    def _generation(self, original, inputs, *args, **kwargs):
        if not self._stepping:
            return original(inputs, *args, **kwargs)
        t0 = time.perf_counter_ns()
        out = original(inputs, *args, **kwargs)
        self._generation_ns += time.perf_counter_ns() - t0
        captured, self._captured = self._captured, None
        rollout, self._generated = self._generated, None
        scoring, self._scoring = self._scoring, []
        try:
            self._name_scoring(out, scoring)
            if captured is not None:
                self._add_generation(out, captured, None if rollout is None else rollout[GENERATE_TOOL_MASK])
        except Exception:
            self._fail("generation batch")
        return out

    def _name_scoring(self, out: dict, scoring: list[tuple[Any, int, int]]) -> None:
        """Each log-prob pass of the generation, timed as the tensor it made: the reference's is the batch's
        `ref_per_token_logps` (with a PEFT adapter TRL scores it with the policy model, adapter off)."""
        ref = out.get("ref_per_token_logps")
        for result, t0, t1 in scoring:
            self._timings.append(("reference" if result[0] is ref else "old_logprobs", t1 - t0, t1))

    def _add_generation(self, out: dict, cap: Captured, tool_mask: list | None) -> None:
        """References to the batch's tensors for its stats and its sample rows (no device op: the logged
        step computes); marks each row's position for the loss. `tool_mask`: TRL's host lists
        (`GENERATE_TOOL_MASK`), whose rows TRL sums for the lengths it logs: the model's tokens alone."""
        ids = out["completion_ids"]
        batch = len(cap.completion_ids)  # this rank's rows, as `ids`'
        if tool_mask is not None:
            lengths, spans = [sum(m) for m in tool_mask], tool_spans(tool_mask)
        else:
            lengths, spans = list(map(len, cap.completion_ids)), []
        tool = out.get("tool_mask")  # TRL's loss masks: a tool's answers and (mask_truncated) truncated rows out
        mask = out["completion_mask"] if tool is None else out["completion_mask"] * tool
        rewards = cap.rewards_per_func
        if rewards.requires_grad:  # TRL's are plain numbers; a subclass's might hold a graph
            rewards = rewards.detach()
        truncated = truncated_flags(cap.completion_ids, self.settings.stop_ids)
        advantages = out["advantages"]
        rows = SampleBatch(cap.prompts, cap.completions, lengths, truncated, self.settings.rank * batch,
                           int(self.trainer.state.global_step), pending=batch)
        gen = Generation(rewards, advantages, ids, mask, lengths, truncated, out.get("sampling_per_token_logps"),
                         out.get("old_per_token_logps"), out.get("importance_sampling_ratio"), rows, spans)
        acc = self.acc
        acc.capture(gen)
        acc.batches.append(rows)
        positions = self._positions.get(batch)
        if positions is None:
            positions = self._positions[batch] = torch.arange(batch, device=ids.device)
        out[ROW_KEY] = positions  # shuffled and split with the batch by TRL (new tensors: this one stays as is)
        self._first_pass = rows

    def _loss(self, original, model, inputs, *args, **kwargs):
        if not self._stepping:
            return original(model, inputs, *args, **kwargs)
        self._loss_logps = None
        loss = original(model, inputs, *args, **kwargs)
        captured, self._loss_logps = self._loss_logps, None
        if captured is not None:
            try:
                self._add_micro_batch(inputs, captured)
            except Exception:
                self._fail("loss")
        return loss

    def _add_micro_batch(self, inputs: dict, result: tuple) -> None:
        """What `_compute_loss` used; no device op beyond the detach of its log-probs (they hold the step's
        graph) and a tool-mask product. TRL passes over a generation batch's chunks in order, so its first
        `pending` rows through the loss are the first pass."""
        logps, entropies = result[0].detach(), result[1]
        if entropies is not None and entropies.requires_grad:
            entropies = entropies.detach()
        get = inputs.get
        old, sampling, target = get("old_per_token_logps"), get("sampling_per_token_logps"), self._first_pass
        # without pi_old, the sampler is measured against this pass's log-probs, on the rows' first pass
        measures_sampler = old is None and sampling is not None and target is not None
        if old is None:  # TRL: pi_old = pi_theta.detach() when it skipped computing it
            old = logps
        mask, tool = inputs["completion_mask"], get("tool_mask")
        if tool is not None:  # completion tokens as TRL's loss masks them (model-generated only)
            mask = mask * tool
        mb = MicroBatch(logps, old, inputs["advantages"], mask,
                        get("ref_per_token_logps") if self.settings.beta != 0.0 else None, entropies,
                        sampling, measures_sampler=measures_sampler)
        if target is not None:
            rows = get(ROW_KEY)
            if rows is not None:  # else (a subclass dropped it) the rows go out without the loss's numbers
                mb.rows, mb.batch = rows, target
            target.pending -= len(logps)
            if target.pending <= 0:
                self._first_pass = None
        self.acc.capture(mb)

    def _training_step(self, original, model, inputs, *args, **kwargs):
        if not self.enabled:
            return original(model, inputs, *args, **kwargs)
        t0 = time.perf_counter_ns()
        self._generation_ns = 0
        self._stepping = True
        try:
            loss = original(model, inputs, *args, **kwargs)
        finally:
            self._stepping = False
        t1 = time.perf_counter_ns()
        if self.enabled:
            try:
                self._step_done(loss, max(t1 - t0 - self._generation_ns, 0), t1)
            except Exception:
                self._fail("loss")
        return loss

    def _step_done(self, loss: torch.Tensor, update_ns: int, end: int) -> None:
        """The step's phases (the update: its time less the generation's), as wall-clock spans, and its loss."""
        timings = self._timings
        timings.append(("update", update_ns, end))
        to_wall = clock.now_ns() - time.perf_counter_ns()  # one clock pair for the step's phases
        self.acc.phases += [(name, ns / 1e9, t1 + to_wall) for name, ns, t1 in timings]
        timings.clear()
        # transformers returns it detached; a subclass's might hold the step's graph
        self.acc.loss(loss.detach() if loss.requires_grad else loss, self.trainer.current_gradient_accumulation_steps)
