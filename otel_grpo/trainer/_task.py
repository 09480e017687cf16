"""The task: digit-string transforms with verifiable rewards and their own data generator.

A prompt is `<bos>` + `num_digits` digits + `>`; the completion should be the
transformed digits followed by `<eos>`. For `reverse`: `<bos>4173>` -> `3714<eos>`.
Two reward functions score every completion on a 0-1 scale:

- `correct`: fraction of target positions the completion gets right (partial credit;
  exact match for the arithmetic kinds);
- `format`: 1 if the completion is exactly `num_digits` digits then `<eos>`, else 0.

The total reward is their weighted sum (weights sum to 1), so it is also on 0-1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._tokenizer import CharTokenizer

TRANSFORMS: dict[str, Callable[[list[int]], list[int]]] = {
    "copy": lambda d: list(d),
    "reverse": lambda d: d[::-1],
    "sort": sorted,
    "add": lambda d: [int(c) for c in str(sum(d))],
    "addmod": lambda d: [sum(d) % 10],
    "max": lambda d: [max(d)],
}
ARITHMETIC = ("add", "addmod")
"""Kinds with `+` between the digits, scored by exact match (no partial credit)."""


@dataclass(kw_only=True, slots=True)
class TaskConfig:
    """Which transform, how long, and how rewards are weighted."""

    kind: str = "reverse"
    """What the completion must do with the prompt digits: copy, reverse, sort, add
    (`<bos>3+5>` -> `8<eos>`) or addmod (the sum modulo 10: `<bos>7+5>` -> `2<eos>`)."""
    num_digits: int = 4
    """Digits per prompt (operands for `add`)."""
    base: int = 10
    """Digits are drawn from 0 .. base-1 (at most 10)."""
    reward_weights: dict[str, float] = field(default_factory=lambda: {"correct": 0.9, "format": 0.1})
    """Weight of each reward function in the total reward; must sum to 1."""

    def __post_init__(self) -> None:
        if self.kind not in TRANSFORMS:
            raise ValueError(f"task.kind must be one of {sorted(TRANSFORMS)}, got {self.kind!r}")
        if self.num_digits <= 0:
            raise ValueError(f"task.num_digits must be positive, got {self.num_digits}")
        if not 2 <= self.base <= 10:
            raise ValueError(f"task.base must be in [2, 10], got {self.base}")
        unknown = set(self.reward_weights) - set(REWARD_FUNCTIONS)
        if unknown:
            raise ValueError(f"task.reward_weights has unknown reward functions {sorted(unknown)}")
        if any(w < 0 for w in self.reward_weights.values()) or abs(sum(self.reward_weights.values()) - 1) > 1e-6:
            raise ValueError(f"task.reward_weights must be non-negative and sum to 1, got {self.reward_weights}")

    @property
    def prompt_len(self) -> int:
        sep = self.num_digits - 1 if self.kind in ARITHMETIC else 0
        return self.num_digits + sep + 2

    @property
    def answer_len(self) -> int:
        """Longest correct answer in digits."""
        if self.kind in ("addmod", "max"):
            return 1
        return len(str((self.base - 1) * self.num_digits)) if self.kind == "add" else self.num_digits

    @property
    def max_new_tokens(self) -> int:
        return self.answer_len + 2


def reward_correct(completion: str, target: str) -> float:
    """Fraction of target positions the completion matches (0 when lengths differ
    by more than nothing: a short or long answer loses the positions it misses)."""
    hits = sum(a == b for a, b in zip(completion, target))
    return hits / max(len(target), len(completion))


def reward_format(completion: str, terminated: bool, *, min_len: int, max_len: int) -> float:
    """1 when the completion is min_len..max_len digits ended by EOS."""
    return float(terminated and min_len <= len(completion) <= max_len and completion.isdigit())


REWARD_FUNCTIONS = ("correct", "format")


@dataclass(slots=True)
class Batch:
    """Prompts of one step: token ids [N, P] and their decoded texts and targets."""

    prompt_ids: torch.Tensor
    prompts: list[str]
    targets: list[str]


class DigitTask:
    """Generates prompts and scores completions for one `TaskConfig`."""

    def __init__(self, cfg: TaskConfig, tokenizer: CharTokenizer) -> None:
        self.cfg = cfg
        self.tok = tokenizer

    def sample_batch(self, n: int, generator: torch.Generator) -> Batch:
        digits = torch.randint(0, self.cfg.base, (n, self.cfg.num_digits), generator=generator)
        if self.cfg.kind == "max":  # the maximum is uniform, so no constant answer beats chance
            top = torch.randint(0, self.cfg.base, (n, 1), generator=generator)
            digits = (torch.rand(digits.shape, generator=generator) * (top + 1)).long().clamp(max=top)
            where = torch.randint(0, self.cfg.num_digits, (n, 1), generator=generator)
            digits.scatter_(1, where, top)
        digits = digits.tolist()
        sep = "+" if self.cfg.kind in ARITHMETIC else ""
        prompts = [sep.join(map(str, d)) + ">" for d in digits]
        targets = ["".join(map(str, TRANSFORMS[self.cfg.kind](d))) for d in digits]
        ids = torch.tensor([self.tok.encode(p, bos=True) for p in prompts], dtype=torch.long)
        return Batch(ids, prompts, targets)

    def sft_targets(self, batch: Batch, generator: torch.Generator, *, mode: str) -> torch.Tensor:
        """Completion ids [N, answer_len + 1] (pad after EOS) for the warm-start: the
        answer, or a random answer of the right format when `correct` is False
        (teaches the format only)."""
        if mode == "correct":
            texts = batch.targets
        elif mode == "bag":  # the prompt's own digits, in random order, answer length
            texts = []
            for p, t in zip(batch.prompts, batch.targets):
                digits = [c for c in p if c.isdigit()]
                idx = torch.randint(0, len(digits), (len(t),), generator=generator).tolist()
                texts.append("".join(digits[i] for i in idx))
        elif self.cfg.kind in ARITHMETIC:
            top = 10 if self.cfg.kind == "addmod" else (self.cfg.base - 1) * self.cfg.num_digits + 1
            rnd = torch.randint(0, top, (len(batch.targets),), generator=generator)
            texts = [str(r) for r in rnd.tolist()]
        else:
            rnd = torch.randint(0, self.cfg.base, (len(batch.targets), self.cfg.answer_len), generator=generator)
            texts = ["".join(map(str, r)) for r in rnd.tolist()]
        width = self.cfg.answer_len + 1
        rows = [self.tok.encode(t, eos=True) for t in texts]
        return torch.tensor([r + [self.tok.pad_id] * (width - len(r)) for r in rows], dtype=torch.long)

    def score(self, completions: list[str], terminated: list[bool], targets: list[str]) -> dict[str, torch.Tensor]:
        """Reward of every completion under every reward function: name -> [N] float32."""
        exact = self.cfg.kind in ARITHMETIC
        correct = [float(c == t) if exact else reward_correct(c, t) for c, t in zip(completions, targets)]
        lo = 1 if exact else self.cfg.answer_len
        fmt = [reward_format(c, e, min_len=lo, max_len=self.cfg.answer_len) for c, e in zip(completions, terminated)]
        return {"correct": torch.tensor(correct), "format": torch.tensor(fmt)}

    def total_reward(self, components: dict[str, torch.Tensor]) -> torch.Tensor:
        return sum(self.cfg.reward_weights.get(k, 0.0) * v for k, v in components.items())
