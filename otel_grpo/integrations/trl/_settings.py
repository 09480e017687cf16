"""What the stats need of a GRPOTrainer and its GRPOConfig: a frozen snapshot taken once by `instrument`.

    settings = TrlSettings(reward_names=("fmt",), reward_weights=(1.0,), num_generations=4,
                           epsilon_low=0.2, epsilon_high=0.2, beta=0.04, stop_ids=frozenset({2}))
    table = policy_table(settings, micro_batches)          # plain tensors + these settings: no TRL

Only `_capture` reads a trainer (`_capture.snapshot`); everything else takes this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

IS_LEVELS, IS_MODES = ("token", "sequence"), ("truncate", "mask")
# TRL 1.16's loss types that clip the ratio to [1 - epsilon_low, 1 + epsilon_high] and log clip_ratio/*;
# cispo logs its own cispo_clip_ratio (passed through from TRL's logs), sapo and vespo clip nothing.
CLIPPED_LOSSES = frozenset({"grpo", "bnpo", "dr_grpo", "dapo", "luspo"})


def fn_name(name: str) -> str:
    """A reward function's name as a stat-key label (no '/': model rewards are named after their path)."""
    return name.replace("/", "_") or "reward"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrlSettings:
    """A GRPOTrainer's settings as the stats use them (fixed for the trainer's life)."""

    reward_names: tuple[str, ...]
    """The reward functions' stat-key labels (`fn_name` of TRL's `reward_func_names`), in TRL's order."""
    reward_weights: tuple[float, ...]
    """TRL's weight of each reward function in the total reward."""
    num_generations: int
    """Completions per prompt (the group size)."""
    epsilon_low: float
    epsilon_high: float
    """The ratio's clip range: [1 - epsilon_low, 1 + epsilon_high]."""
    delta: float | None = None
    """TRL's two-sided GRPO bound (`GRPOConfig.delta`): TRL caps the ratio at delta before it flags clipped
    tokens, so with delta <= 1 + epsilon_high none is high-clipped; None: no cap."""
    beta: float
    """The KL coefficient; 0: TRL computes no reference log-probs."""
    stop_ids: frozenset[int]
    """EOS and pad ids: a completion ending on another token was truncated at the length limit."""
    rank: int = 0
    world: int = 1
    """This process's index and the number of processes (TRL gathers rewards over them)."""
    loss_type: str = "grpo"
    importance_sampling_level: str = "token"
    """TRL's ratio level: "token", or "sequence" (GSPO, luspo)."""
    use_bias_correction_kl: bool = False
    """TRL's `kl` is k3 times the policy ratio."""
    max_completion_length: int = 0
    """The generation limit (distinct-n's width); 0: unknown, the batch's width is used."""
    is_level: str = "token"
    is_mode: str = "truncate"
    is_threshold: tuple[float, float] = (0.0, math.inf)
    """How TRL corrects the sampler mismatch (`vllm_importance_sampling_mode`, clip min / max)."""
    model_name: str | None = None
    """The model's `_name_or_path` (telemetry's `model_name` default)."""

    def __post_init__(self) -> None:
        if len(self.reward_names) != len(self.reward_weights):
            raise ValueError(f"reward_weights: {len(self.reward_weights)} weights for "
                             f"{len(self.reward_names)} reward functions")
        if self.num_generations < 1:
            raise ValueError(f"num_generations: must be at least 1, got {self.num_generations}")
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank: {self.rank} is not a process of {self.world}")
        if self.importance_sampling_level not in IS_LEVELS:
            raise ValueError(f"importance_sampling_level: {self.importance_sampling_level!r} is not one of {IS_LEVELS}")
        if self.is_level not in IS_LEVELS or self.is_mode not in IS_MODES:
            raise ValueError(f"is_level, is_mode: ({self.is_level!r}, {self.is_mode!r}) is not one of "
                             f"{IS_LEVELS} x {IS_MODES}")

    @property
    def clipped(self) -> bool:
        """TRL clips the ratio two-sided and logs clip_ratio/*."""
        return self.loss_type in CLIPPED_LOSSES

    @property
    def sequence(self) -> bool:
        return self.importance_sampling_level == "sequence"
