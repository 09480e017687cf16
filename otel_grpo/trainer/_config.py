"""The trainer's configuration: one `TrainConfig` of small sections, each validated on construction.

    cfg = TrainConfig(steps=50, grpo=GRPOConfig(group_size=8))
    cfg = load_config(preset="demo", yaml_path="my.yaml", overrides=["optim.lr=1e-3"])

Every field carries its own docstring; cross-field rules live in `__post_init__`,
so a bad config fails at construction, before any training starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._fault_spec import check_fault_steps
from ._faults import Fault, FaultConfig
from ._model import ModelConfig
from ._task import TaskConfig

ROLLOUT_IS_LEVELS = ("token", "sequence", "geometric")
ROLLOUT_IS_MODES = ("truncate", "mask", "both")


@dataclass(kw_only=True, slots=True)
class GRPOConfig:
    """Sampling, advantages and the clipped policy loss."""

    prompts_per_step: int = 32
    """Prompts per step on each process."""
    group_size: int = 8
    """Completions sampled per prompt (G); advantages are normalized within each group."""
    temperature: float = 1.0
    """Sampling temperature of the rollout policy (log-probs use the same temperature)."""
    epsilon_low: float = 0.2
    """Lower clip range: the ratio is clipped at 1 - epsilon_low."""
    epsilon_high: float = 0.28
    """Upper clip range: the ratio is clipped at 1 + epsilon_high (DAPO's clip-higher)."""
    beta: float = 0.01
    """Coefficient of the k3 KL penalty to the reference policy (0 disables it)."""
    ref_sync_steps: int = 0
    """0: the reference stays frozen (the initial / warm-started policy). N > 0: every N
    steps it moves toward the policy, ref = alpha * policy + (1 - alpha) * ref (TRL's
    `sync_ref_model`), so the KL measures recent drift rather than distance from init."""
    ref_mixup_alpha: float = 0.6
    """alpha of the reference update when `ref_sync_steps` > 0 (TRL's `ref_model_mixup_alpha`)."""
    loss_type: str = "grpo"
    """Aggregation over tokens: grpo (sequence mean, then batch mean) or dapo (token mean)."""
    scale_rewards: bool = True
    """Divide advantages by the group's reward std (GRPO); False is Dr. GRPO."""
    num_iterations: int = 2
    """Passes over each generation batch (PPO epochs): more passes move the ratio away from 1."""
    num_minibatches: int = 2
    """Optimizer steps per pass; the step does num_iterations * num_minibatches updates."""

    def __post_init__(self) -> None:
        for name in ("prompts_per_step", "num_iterations", "num_minibatches"):
            if getattr(self, name) <= 0:
                raise ValueError(f"grpo.{name} must be positive, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"grpo.group_size must be at least 2 (advantages are group-relative), got {self.group_size}")
        if not 0.0 < self.epsilon_low < 1.0:
            raise ValueError(f"grpo.epsilon_low must be in (0, 1), got {self.epsilon_low}")
        if not 0.0 < self.epsilon_high <= 10.0:
            raise ValueError(f"grpo.epsilon_high must be in (0, 10], got {self.epsilon_high}")
        if self.beta < 0:
            raise ValueError(f"grpo.beta must be >= 0, got {self.beta}")
        if self.ref_sync_steps < 0 or not 0.0 < self.ref_mixup_alpha <= 1.0:
            raise ValueError("grpo.ref_sync_steps must be >= 0 and grpo.ref_mixup_alpha in (0, 1]")
        if self.temperature <= 0:
            raise ValueError(f"grpo.temperature must be positive, got {self.temperature}")
        from ._loss import LOSSES

        if self.loss_type not in LOSSES:
            raise ValueError(f"grpo.loss_type must be one of {sorted(LOSSES)}, got {self.loss_type!r}")
        if (self.prompts_per_step * self.group_size) % self.num_minibatches:
            raise ValueError("grpo.num_minibatches must divide prompts_per_step * group_size")


@dataclass(kw_only=True, slots=True)
class OptimConfig:
    """AdamW, warm-up and the optional supervised warm-start."""

    lr: float = 3e-3
    """Peak learning rate of the GRPO updates."""
    warmup_steps: int = 0
    """Steps of linear learning-rate warm-up at the start of GRPO."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clipping threshold (the norm before clipping is reported)."""
    sft_steps: int = 0
    """Supervised warm-start steps before GRPO (phase `warmup`); 0 skips it. (On the
    digit tasks GRPO learns faster from the random init than after a format-only warm-start.)"""
    sft_lr: float = 3e-3
    """Learning rate of the warm-start."""
    sft_batch_size: int = 64
    """Prompts per warm-start step."""
    sft_correct: bool = False
    """Warm-start on correct answers (True) or on random answers of the right format
    (False: the model learns the format, GRPO has to find the answer)."""

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.sft_lr <= 0:
            raise ValueError(f"optim.lr and optim.sft_lr must be positive, got {self.lr}, {self.sft_lr}")
        for name in ("warmup_steps", "sft_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"optim.{name} must be >= 0, got {getattr(self, name)}")
        if self.sft_batch_size <= 0:
            raise ValueError(f"optim.sft_batch_size must be positive, got {self.sft_batch_size}")
        if self.max_grad_norm <= 0 or self.weight_decay < 0:
            raise ValueError("optim.max_grad_norm must be positive and optim.weight_decay >= 0")


@dataclass(kw_only=True, slots=True)
class RolloutCorrectionConfig:
    """Rollout-vs-training IS correction (`signals.rollout_correction`). Mismatch is always measured."""

    enabled: bool = False
    """Weight the policy-gradient term by truncated IS weights pi_train / pi_rollout."""
    level: str = "token"
    """token, sequence or geometric (per-sequence geometric mean)."""
    mode: str = "truncate"
    """truncate (clamp weights into the thresholds), mask (drop tokens outside them) or both."""
    threshold_lower: float = 0.5
    """Lower IS threshold (mask mode; also the low fraction metric)."""
    threshold_upper: float = 2.0
    """Upper IS threshold."""
    mask_threshold_lower: float | None = None
    """Lower bound of mask mode (tokens with a ratio below it are dropped); None: `threshold_lower`."""
    mask_threshold_upper: float | None = None
    """Upper bound of mask mode; None: `threshold_upper`."""
    veto_threshold: float | None = None
    """Drop a whole sequence when any token ratio falls below this (None: no lower veto)."""
    veto_threshold_upper: float | None = None
    """Drop a whole sequence when any token ratio rises above this (None: no upper veto)."""

    def mask_bounds(self) -> tuple[float, float] | None:
        """(lower, upper) of mask mode, or None to use the IS thresholds."""
        if self.mask_threshold_lower is None and self.mask_threshold_upper is None:
            return None
        lower = self.threshold_lower if self.mask_threshold_lower is None else self.mask_threshold_lower
        upper = self.threshold_upper if self.mask_threshold_upper is None else self.mask_threshold_upper
        return lower, upper

    def veto_bounds(self) -> tuple[float, float] | None:
        """(lower, upper) of the veto (0 / inf for a side not set), or None without a veto."""
        if self.veto_threshold is None and self.veto_threshold_upper is None:
            return None
        lower = 0.0 if self.veto_threshold is None else self.veto_threshold
        return lower, float("inf") if self.veto_threshold_upper is None else self.veto_threshold_upper

    def __post_init__(self) -> None:
        if self.level not in ROLLOUT_IS_LEVELS:
            raise ValueError(f"rollout_correction.level must be one of {ROLLOUT_IS_LEVELS}, got {self.level!r}")
        if self.mode not in ROLLOUT_IS_MODES:
            raise ValueError(f"rollout_correction.mode must be one of {ROLLOUT_IS_MODES}, got {self.mode!r}")
        if not 0 < self.threshold_lower < 1 < self.threshold_upper:
            raise ValueError("rollout_correction needs 0 < threshold_lower < 1 < threshold_upper")
        mask = self.mask_bounds()
        if mask is not None and not 0 < mask[0] < 1 < mask[1]:
            raise ValueError("rollout_correction needs 0 < mask_threshold_lower < 1 < mask_threshold_upper")
        veto = self.veto_bounds()
        if veto is not None and not 0 <= veto[0] < 1 < veto[1]:
            raise ValueError("rollout_correction needs 0 <= veto_threshold < 1 < veto_threshold_upper")


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """Everything one `otel-grpo train` run needs."""

    steps: int = 60
    """GRPO steps (one generation batch each)."""
    seed: int = 0
    """Seed of model init, data and sampling (each process adds its rank)."""
    run_id: str | None = None
    """Run identifier on every data point; None: generated (or taken from the checkpoint on resume)."""
    output_dir: str | None = None
    """Run directory: metrics.jsonl, sample spill, checkpoints. None: runs/<run_id>."""
    telemetry: bool = True
    """Emit through OpenTelemetry (exporters from OTEL_GRPO_* variables)."""
    device: str = "auto"
    """auto (a CUDA GPU where torch sees one, else the CPU), cpu or cuda (an error where torch sees none)."""
    mixed_precision: str = "no"
    """Accelerate mixed precision of the training policy: no, bf16 or fp16 (GPU only: an error on the CPU)."""
    num_threads: int = 0
    """torch CPU threads per process; 0 leaves torch's default."""
    min_step_seconds: float = 0.0
    """Each step lasts at least this long (sleeps the rest), so a scraper sees every step."""
    checkpoint_every: int = 20
    """Save a checkpoint every N steps (and at the end); 0: only at the end."""
    resume: bool = False
    """Continue from the last checkpoint in output_dir: its weights, step count and run id. Where
    output_dir has no checkpoint, a ConfigError naming it (never a silent fresh start)."""
    progress: bool = True
    """Show progress with live reward, KL and clip ratio on stderr (rank 0): a bar on a terminal,
    elsewhere (a pipe, a log file) a line after the first step, every 10 s and at the last step."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Shape of the policy transformer."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """The digit task and its reward weights."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """Sampling, advantages, the clipped loss, KL and the reference."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer, learning rate and the optional warm-start."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """Rollout-vs-training IS correction (off by default; the mismatch is always measured)."""
    faults: FaultConfig = field(default_factory=FaultConfig)
    """Faults to inject (`--fault KIND@STEP`)."""

    def __post_init__(self) -> None:
        if self.steps <= 0:
            raise ValueError(f"steps must be positive, got {self.steps}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"mixed_precision must be no, bf16 or fp16, got {self.mixed_precision!r}")
        for name, flag in (("num_threads", ""), ("min_step_seconds", " (--step-delay)"), ("checkpoint_every", "")):
            if getattr(self, name) < 0:  # the one the user gave, and its flag where `otel-grpo train` has one
                raise ValueError(f"{name}{flag} must be >= 0, got {getattr(self, name)}")
        check_fault_steps(self.faults.parsed(), self.steps)
        seq_len = self.task.prompt_len + self.task.max_new_tokens
        if seq_len > self.model.max_len:
            raise ValueError(f"model.max_len ({self.model.max_len}) is shorter than prompt + completion ({seq_len})")


__all__ = ["Fault", "GRPOConfig", "OptimConfig", "RolloutCorrectionConfig", "TrainConfig"]
