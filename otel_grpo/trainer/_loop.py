"""The GRPO loop, top to bottom.

Per step: sample G completions per prompt from the bf16 rollout copy (phase
`rollout`), score them with every reward function and normalize advantages within
each group (`reward`), get the training policy's and the frozen reference's
log-probs of the sampled tokens (`reference`), then take
`num_iterations * num_minibatches` clipped policy-gradient steps with a k3 KL
penalty (`update`) and copy the new weights into the rollout engine.

All statistics stay on the device as partial aggregates until `reduce_stats`,
which makes the step's one device-to-host copy (exact across ranks).
"""

from __future__ import annotations

import copy
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from .. import catalog, signals
from ._config import TrainConfig
from ._loading import ConfigError, to_dict
from ._loss import LOSSES, group_advantages
from ._model import TinyGPT, token_logprobs
from ._rollout import Rollout, RolloutEngine
from ._runtime import (CHECKPOINT, METRICS, Progress, StopFlag, append_metrics, first_line,
                       load_checkpoint, monotonic, save_checkpoint, trains_on_cpu)
from ._task import Batch, DigitTask
from ._tokenizer import CharTokenizer

logger = logging.getLogger("otel_grpo.trainer")
MAX_FAILED_BATCHES = 3
"""Consecutive failed batches after which training stops (a bug, not a bad batch)."""


@dataclass(slots=True)
class TrainResult:
    """What `GRPOTrainer.train` returns: where it stopped and what it measured (rank-local copy)."""

    run_id: str
    output_dir: Path
    start_step: int
    last_step: int
    history: list[dict[str, float]]
    interrupted: bool
    is_main: bool = True
    """Whether this process is rank 0 (the one that exports and writes files)."""


def _new_run_id() -> str:
    return f"grpo-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


class GRPOTrainer:
    """Owns the policy, its frozen reference, the rollout engine, the optimizer and telemetry.

        trainer = GRPOTrainer(load_config(preset="tiny"))
        result = trainer.train()

    `telemetry`: a `otel_grpo.telemetry.Telemetry` to emit through; None builds one
    from the environment when `cfg.telemetry`, else nothing is emitted. Under torchrun, a
    script that ends after `train()` ends as `otel-grpo train` does (`otel_grpo.cli.train.end_rank_process`):
    torch keeps the DDP model's gloo threads alive to the interpreter's exit, where they can
    abort the rank.
    """

    def __init__(self, cfg: TrainConfig, *, telemetry: Any = None, accelerator: Any = None) -> None:
        from accelerate import Accelerator

        self.cfg = cfg
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        # "auto" must become cpu=True on a machine without CUDA: accelerate only joins a
        # torchrun process group on CPU (gloo) when told cpu=True; otherwise every
        # process trains alone as its own rank 0.
        self.acc = accelerator or Accelerator(cpu=trains_on_cpu(cfg.device, cfg.mixed_precision),
                                              mixed_precision=cfg.mixed_precision)
        self.device = self.acc.device
        self.tok = CharTokenizer()
        self.task = DigitTask(cfg.task, self.tok)
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        policy = TinyGPT(cfg.model, self.tok.vocab_size)
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        self.start_step, self.num_tokens, state = 0, 0.0, None
        self.run_id, self.output_dir = self._resolve_run()
        if cfg.resume:  # _resolve_run checked that the checkpoint is there
            state = load_checkpoint(self.output_dir / CHECKPOINT)
            try:
                policy.load_state_dict(state["model"])
            except RuntimeError as e:  # another preset's or model settings' weights
                raise ConfigError(f"resume: {self.output_dir / CHECKPOINT} holds weights of another model (saved "
                                  f"with other model settings or preset?): {first_line(e)}") from None
            self.start_step, self.num_tokens = state["next_step"], state["num_tokens"]
        if self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            if self.start_step == 0:  # a fresh run: no stale lines from an earlier one
                (self.output_dir / METRICS).unlink(missing_ok=True)
        self.policy, self.optimizer = self.acc.prepare(policy, self.optimizer)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.reference = copy.deepcopy(self.unwrapped).requires_grad_(False).eval()
        if state is not None:
            self.reference.load_state_dict(state["reference"])
        self.rollout = RolloutEngine(self.unwrapped)
        self.rollout.version = state["policy_version"] if state else 0
        g = cfg.grpo
        self.loss_fn = LOSSES[g.loss_type](epsilon_low=g.epsilon_low, epsilon_high=g.epsilon_high, beta=g.beta)
        self.telemetry = telemetry if telemetry is not None else self._build_telemetry()
        self.stop = StopFlag()
        self.failed_in_a_row = 0

    @property
    def unwrapped(self) -> TinyGPT:
        return self.acc.unwrap_model(self.policy)

    @property
    def is_main(self) -> bool:
        return self.acc.is_main_process

    def _resolve_run(self) -> tuple[str, Path]:
        """Run id and directory, identical on every rank (rank 0 decides, then broadcasts)."""
        from accelerate.utils import broadcast_object_list

        from ..telemetry import TelemetrySettings

        cfg = self.cfg
        run_id = cfg.run_id or TelemetrySettings.environment().get("run_id")  # --run-id, else OTEL_GRPO_RUN_ID
        out = Path(cfg.output_dir) if cfg.output_dir else None
        if cfg.resume and out is not None and (out / CHECKPOINT).exists() and run_id is None:
            run_id = load_checkpoint(out / CHECKPOINT)["run_id"]
        if run_id is None:
            chosen = [_new_run_id() if self.is_main else None]
            if self.acc.num_processes > 1:
                broadcast_object_list(chosen)
            run_id = chosen[0]
        try:  # it names the run directory below: no absolute path or '..' (and the sidecar must address it)
            run_id = catalog.spans.check_run_id(run_id)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        out = out or Path("runs") / run_id
        if cfg.resume and not (out / CHECKPOINT).exists():  # a typo in the path would otherwise start over
            raise ConfigError(f"resume: no checkpoint to continue from in {out} ({out / CHECKPOINT} does not exist); "
                              "name the run's output_dir, or leave resume off to start a fresh run")
        return run_id, out

    def _build_telemetry(self) -> Any:
        from ..telemetry import Telemetry

        if not self.cfg.telemetry:
            return Telemetry.disabled()

        m = self.cfg.model  # the resource's grpo.model, unless OTEL_GRPO_MODEL_NAME names it
        model = f"demo-gpt-{m.n_layer}x{m.d_model}-{self.cfg.task.kind}"
        return Telemetry.from_env(run_id=self.run_id, output_dir=str(self.output_dir), defaults={"model_name": model})

    # ---- the loop ----------------------------------------------------------------------
    def train(self) -> TrainResult:
        cfg, history = self.cfg, []
        progress = Progress(cfg.steps, self.start_step, cfg.progress and self.is_main)
        step = self.start_step - 1
        ended = False  # completed or stopped by the user; an exception leaves the run unfinished
        try:
            with self.stop.installed():
                for step in range(self.start_step, cfg.steps):
                    if cfg.faults.stalls_at(step):
                        progress.note(f"fault: stall at step {step}")
                        self.stop.sleep(cfg.faults.stall_seconds)  # alive, no progress
                    if self.stop.is_set():
                        step -= 1
                        break
                    t0 = monotonic()
                    values = self.train_step(step)
                    history.append(values)
                    progress.update(values)
                    if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
                        self.save(step + 1)
                    if cfg.min_step_seconds:
                        self.stop.sleep(max(cfg.min_step_seconds - (monotonic() - t0), 1e-3))
                    if self.stop.is_set():
                        break
            ended = True
        finally:
            progress.close()
            self.save(step + 1)
            preempted = ended and self.stop.preempted  # SIGTERM: resumed later, not finished
            self.telemetry.shutdown(finished=ended and not preempted, preempted=preempted)
        return TrainResult(self.run_id, self.output_dir, self.start_step, step, history, self.stop.is_set(), self.is_main)

    def train_step(self, step: int) -> dict[str, float]:
        """One GRPO step; returns the step's scalars (identical on every rank)."""
        cfg, G = self.cfg, self.cfg.grpo.group_size
        t0 = monotonic()
        gen_cpu, gen_dev = self._generators(step)
        with self.telemetry.step(step) as s:
            if step == 0 and cfg.optim.sft_steps:
                with s.phase("warmup"):
                    self.warm_start(gen_cpu)
            failure = None
            try:
                with s.phase("rollout"):
                    batch = self.task.sample_batch(cfg.grpo.prompts_per_step, gen_cpu)
                    prompts = signals.to_device(batch.prompt_ids, self.device)
                    ro = self.rollout.generate(
                        prompts, G, cfg.task.max_new_tokens, eos_id=self.tok.eos_id,
                        pad_id=self.tok.pad_id, temperature=cfg.grpo.temperature, generator=gen_dev)
                with s.phase("reward"):
                    if cfg.faults.bad_batch_at(step):
                        raise RuntimeError(f"fault bad-batch: scoring the batch of step {step} failed")
                    rows, components = self.score(batch, ro)
                    rewards = self.task.total_reward(components)
                    advantages = group_advantages(rewards, G, scale=cfg.grpo.scale_rewards)
                    for row, adv in zip(rows, advantages.tolist()):
                        row["advantage"] = adv
                with s.phase("reference"):
                    old_lp, ref_lp = self.score_logprobs(ro)
            except Exception as exc:  # a failed batch is skipped, not fatal (the phase span has the error)
                failure = exc
            if self.batch_failed(failure):
                s.skip()
                s.record({"step": float(step)})
                if self.is_main:
                    append_metrics(self.output_dir / METRICS, step, {"skipped": 1.0})
                return {"step": float(step), "skipped": 1.0}
            # the host's rewards and advantages in one copy that does not wait for the device
            rewards, *per_fn, advantages = signals.to_device(
                torch.stack([rewards, *components.values(), advantages]), self.device).unbind()
            stats = (
                signals.reward_stats(rewards, G, dict(zip(components, per_fn)), advantages)
                | signals.length_stats(ro.completion_mask, ro.truncated)
                | signals.diversity_stats(ro.completion_ids, ro.completion_mask, group_size=G)
                | signals.mismatch_stats(old_lp, ro.rollout_logprobs, ro.completion_mask)
                # each completion's own numbers for the sample table, each measured where the step's value
                # beside it is: the mismatch at scoring here, KL and entropy in the update's passes
                | signals.sample_diagnostics(ro.completion_mask, logprobs=old_lp, rollout_logprobs=ro.rollout_logprobs,
                                             truncated=ro.truncated)
            )
            with s.phase("update"):
                update_stats, skipped = self.update(step, ro, old_lp, ref_lp, advantages, gen_cpu)
            stats = stats | update_stats
            self.rollout.sync(self.unwrapped, drift=cfg.faults.rollout_drift(step), generator=gen_dev)
            # No reference sync during a kl-spike fault: the sync tracks slow drift, and
            # following a blown-up policy would erase the very KL the fault demonstrates.
            spiking = cfg.faults.lr_factor(step) != 1.0
            if cfg.grpo.ref_sync_steps and (step + 1) % cfg.grpo.ref_sync_steps == 0 and not spiking:
                self.sync_reference(cfg.grpo.ref_mixup_alpha)
            reduced = signals.reduce_stats(stats, self.acc)  # the step's one device-to-host copy
            reduced.update(self.host_scalars(step, reduced, monotonic() - t0))
            if skipped:
                s.skip()
            s.record(reduced)
            per_sample = reduced.column_rows(self.acc.process_index, self.acc.num_processes)
            s.samples([{**row, **extra} for row, extra in zip(rows, per_sample)], group_size=G)
        if self.is_main:
            append_metrics(self.output_dir / METRICS, step, reduced)
        return dict(reduced)

    def batch_failed(self, failure: Exception | None) -> bool:
        """Whether any rank failed to prepare its batch; all ranks then skip the step together.

        Raises after `MAX_FAILED_BATCHES` failures in a row: a bug, not a bad batch.
        """
        failed = failure is not None
        if self.acc.num_processes > 1:
            flag = torch.tensor([float(failed)], device=self.device)
            # Host sync (multi-process only): every rank must agree before the update's collectives.
            failed = bool(self.acc.reduce(flag, reduction="sum").item() > 0)
        self.failed_in_a_row = self.failed_in_a_row + 1 if failed else 0
        if failure is not None:
            logger.warning("otel-grpo train: skipping the step, its batch failed: %s", failure)
        if self.failed_in_a_row >= MAX_FAILED_BATCHES:
            raise RuntimeError(f"{MAX_FAILED_BATCHES} batches in a row failed; stopping") from failure
        return failed

    def _generators(self, step: int) -> tuple[torch.Generator, torch.Generator]:
        """Per-step RNGs derived from (seed, rank, step): a resumed run draws the same data."""
        seed = self.cfg.seed * 1_000_003 + self.acc.process_index * 10_007 + step
        gen_dev = torch.Generator(device=self.device)
        return torch.Generator().manual_seed(seed), gen_dev.manual_seed(seed)

    # ---- phases ------------------------------------------------------------------------
    def warm_start(self, gen: torch.Generator) -> None:
        """Supervised warm-start (format only unless `sft_correct`); the reference is taken after it."""
        o, P = self.cfg.optim, self.cfg.task.prompt_len
        mode = "correct" if o.sft_correct else "random"
        for group in self.optimizer.param_groups:
            group["lr"] = o.sft_lr
        for _ in range(o.sft_steps):
            batch = self.task.sample_batch(o.sft_batch_size, gen)
            target = self.task.sft_targets(batch, gen, mode=mode)
            ids = torch.cat([batch.prompt_ids, target], 1).to(self.device)
            with self.acc.autocast():
                logp, _ = token_logprobs(self.policy, ids, P)
            keep = (target != self.tok.pad_id).to(self.device, logp.dtype)
            loss = -(logp * keep).sum() / keep.sum()
            self.acc.backward(loss)
            self.optimizer.step()
            self.optimizer.zero_grad()
        self.reference.load_state_dict(self.unwrapped.state_dict())
        self.rollout.sync(self.unwrapped)

    def score(self, batch: Batch, ro: Rollout) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
        """Reward of every completion under every reward function, and the sample rows.

        Rewards are computed on text, so the completion ids come to the host here
        (a device-to-host copy inherent to text rewards, as in any GRPO trainer).
        """
        G = self.cfg.grpo.group_size
        lengths = ro.completion_mask.sum(1, keepdim=True).long()
        # Host sync: one copy of completion ids, lengths and truncation flags for the reward functions.
        packed = torch.cat([ro.completion_ids, lengths, ro.truncated[:, None].long()], 1).cpu()
        texts = [self.tok.decode(row) for row in packed[:, :-2]]
        lengths, terminated = packed[:, -2].tolist(), (packed[:, -1] == 0).tolist()
        targets = [t for t in batch.targets for _ in range(G)]
        components = self.task.score(texts, terminated, targets)
        total = self.task.total_reward(components).tolist()
        per_fn = {k: v.tolist() for k, v in components.items()}
        rows = [
            {"prompt": batch.prompts[i // G], "completion": texts[i], "target": targets[i], "reward": total[i],
             "rewards": {k: per_fn[k][i] for k in per_fn}, "completion_length": lengths[i],
             "prompt_length": self.cfg.task.prompt_len, "policy_version": self.rollout.version,
             "group": i // G, "terminated": terminated[i]}
            for i in range(len(texts))
        ]
        return rows, components

    @torch.no_grad()
    def score_logprobs(self, ro: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi_old (the training policy before this step's update) and log pi_ref of the sampled tokens."""
        P, temp = self.cfg.task.prompt_len, self.cfg.grpo.temperature
        with self.acc.autocast():
            old, _ = token_logprobs(self.unwrapped, ro.ids, P, temperature=temp)
            ref, _ = token_logprobs(self.reference, ro.ids, P, temperature=temp)
        return old.float(), ref.float()

    def update(self, step: int, ro: Rollout, old_lp: torch.Tensor, ref_lp: torch.Tensor, advantages: torch.Tensor,
               gen: torch.Generator) -> tuple[signals.Stats, bool]:
        """`num_iterations` passes of `num_minibatches` clipped policy-gradient steps.

        Returns the merged policy/clip/KL/loss stats and whether an update was skipped
        because its gradient was not finite.
        """
        cfg, P = self.cfg, self.cfg.task.prompt_len
        g = cfg.grpo
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate(step)
        mask, is_weights = ro.completion_mask, None
        stats = signals.Stats()
        if cfg.rollout_correction.enabled:
            rc = cfg.rollout_correction
            is_weights, mask, is_stats = signals.rollout_correction(
                old_lp, ro.rollout_logprobs, mask, level=rc.level, mode=rc.mode,
                threshold=(rc.threshold_lower, rc.threshold_upper),
                mask_threshold=rc.mask_bounds(), veto_threshold=rc.veto_bounds())
            stats = stats | is_stats
        skipped = False
        inject_nan = cfg.faults.nan_at(step)
        passes: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # rows, log-probs, entropy of each pass
        for _ in range(g.num_iterations):
            order = signals.to_device(torch.randperm(ro.ids.shape[0], generator=gen), self.device)
            for idx in order.chunk(g.num_minibatches):
                with self.acc.autocast():
                    logp, entropy = token_logprobs(self.policy, ro.ids[idx], P, temperature=g.temperature,
                                                   with_entropy=True)
                logp = logp.float()
                w = None if is_weights is None else is_weights[idx]
                loss, policy_term, kl_term = self.loss_fn.terms(logp, old_lp[idx], ref_lp[idx], advantages[idx],
                                                                mask[idx], w)
                if inject_nan:
                    loss = loss * float("nan")  # fault `nan`: a non-finite loss
                self.acc.backward(loss)
                grad_norm = self.acc.clip_grad_norm_(self.policy.parameters(), cfg.optim.max_grad_norm)
                # Host sync: skip an update whose gradient is not finite. The gradient is
                # all-reduced already, so every rank takes the same branch.
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                else:
                    skipped = True
                self.optimizer.zero_grad(set_to_none=True)
                stats = stats | signals.policy_stats(
                    logp.detach(), old_lp[idx], advantages[idx], mask[idx], g.epsilon_low, g.epsilon_high,
                    ref_logprobs=ref_lp[idx], entropy=entropy.detach().float())
                stats |= signals.loss_stats(loss.detach(), policy_term.detach(), kl_term.detach(), entropy=0.0)  # no bonus
                stats.add_mean("grad_norm", grad_norm.detach(), 1.0)
                passes.append((idx, logp.detach(), entropy.detach().float()))
        # each completion's KL and entropy pooled over the passes that read it, as the step's `kl` and
        # `entropy` pool them: sorting a step's samples by KL shows what drove the step's KL
        rows, logps, entropies = (torch.cat(t) for t in zip(*passes))
        stats |= signals.sample_diagnostics(mask[rows], logprobs=logps, ref_logprobs=ref_lp[rows], entropy=entropies,
                                            rows=rows, size=ro.ids.shape[0])
        return stats, skipped

    @torch.no_grad()
    def sync_reference(self, alpha: float) -> None:
        """ref = alpha * policy + (1 - alpha) * ref (TRL's reference-model sync)."""
        for ref, pol in zip(self.reference.parameters(), self.unwrapped.parameters()):
            ref.lerp_(pol.detach(), alpha)

    def learning_rate(self, step: int) -> float:
        """Linear warm-up to `optim.lr`, then constant; times the kl-spike fault's factor."""
        o = self.cfg.optim
        warm = min(1.0, (step + 1) / o.warmup_steps) if o.warmup_steps else 1.0
        return o.lr * warm * self.cfg.faults.lr_factor(step)

    def host_scalars(self, step: int, reduced: dict[str, float], elapsed: float) -> dict[str, float]:
        """Scalars the host already knows: learning rate, beta, step, token counts, timing."""
        prompt_tokens = self.cfg.task.prompt_len * self.cfg.grpo.prompts_per_step * self.cfg.grpo.group_size
        step_tokens = reduced.get("tokens", 0.0) + prompt_tokens * self.acc.num_processes
        self.num_tokens += step_tokens
        return {
            "learning_rate": self.learning_rate(step), "beta": self.cfg.grpo.beta, "step": float(step),
            "num_tokens": self.num_tokens, "step_time": elapsed, "tokens_per_second": step_tokens / max(elapsed, 1e-9),
            "tokens_per_second_per_gpu": step_tokens / max(elapsed * self.acc.num_processes, 1e-9),
        }

    def save(self, next_step: int) -> None:
        """Checkpoint (rank 0): weights, reference, optimizer, step count, run id, config."""
        if not self.is_main or next_step <= self.start_step:
            return
        with self.telemetry.beat_while_writing(self.output_dir):  # a long save that writes is no stall
            save_checkpoint(self.output_dir / CHECKPOINT, {
                "next_step": next_step, "run_id": self.run_id, "num_tokens": self.num_tokens,
                "policy_version": self.rollout.version, "model": self.unwrapped.state_dict(),
                "reference": self.reference.state_dict(), "optimizer": self.optimizer.state_dict(),
                "config": to_dict(self.cfg),
            })
