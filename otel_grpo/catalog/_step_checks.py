"""Per-step checks the training process evaluates on every step, for lossless alert evidence.

Prometheus samples a gauge once a scrape, so with 2 s steps and 15 s scrapes it
never sees 6 steps of 7. For the scalars that alerts compare with a threshold, the
training process itself counts, on every step and for every bound below, how many
consecutive steps the value has been beyond the bound (`grpo.step.streak`), and
counts the steps at which that streak had reached 1, 2, 3, 5 or 10 steps
(`grpo.step.beyond`, a counter: lossless between scrapes). An alert "N
consecutive steps over T" reads the counter with `bound="T", streak="N"`; a step
within the bound resets the streak. Thresholds (and per-run overrides) must
therefore be one of the bounds (`otel_grpo.stack.RuleSettings` checks it).

    >>> STEP_CHECKS["kl"].bounds[:3]
    (0.1, 0.2, 0.5)
    >>> STEP_CHECKS["rollout_is_eff_sample_size"].below
    True
"""

from __future__ import annotations

from dataclasses import dataclass

STREAKS: tuple[int, ...] = (1, 2, 3, 5, 10)
"""Streak lengths counted by `grpo.step.beyond` (its `streak` attribute): the N an alert may ask for."""


@dataclass(frozen=True, slots=True)
class StepCheck:
    """One checked scalar: the bounds it is compared with on every step."""

    key: str
    """Catalog key of the scalar."""
    bounds: tuple[float, ...]
    """Thresholds the streaks are kept for (each one a series set: keep them few)."""
    below: bool = False
    """Beyond means below the bound (an effective sample size), not above it."""

    def __post_init__(self) -> None:
        if not self.bounds or list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"{self.key!r}: bounds must be non-empty and strictly increasing")

    def beyond(self, value: float, bound: float) -> bool:
        return value < bound if self.below else value > bound

    def advance(self, streaks: list[int], value: float) -> None:
        """One step of `value`: each bound's streak grows by one if beyond it, else restarts at 0.

        The one definition of a streak, shared by the training process (telemetry) and
        the alert tests' replay of recorded runs (otel_grpo.stack).
        """
        for i, bound in enumerate(self.bounds):
            streaks[i] = streaks[i] + 1 if self.beyond(value, bound) else 0


def reached(streak: int) -> tuple[int, ...]:
    """The streak lengths of `STREAKS` that a streak has reached (the counters one step adds to)."""
    return tuple(n for n in STREAKS if streak >= n)


def bound_label(bound: float) -> str:
    """The `bound` attribute of a bound, as the alert rules select it: 1.0 -> "1.0", 0.01 -> "0.01"."""
    return repr(float(bound))


STEP_CHECKS: dict[str, StepCheck] = {c.key: c for c in (
    StepCheck("kl", (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)),
    StepCheck("mismatch_k3_kl", (0.001, 0.003, 0.01, 0.03, 0.1)),
    StepCheck("rollout_is_eff_sample_size", (0.2, 0.3, 0.5, 0.7), below=True),
    StepCheck("mismatch_chi2_token", (0.3, 1.0, 3.0)),
    StepCheck("rollout_is_veto_fraction", (0.01, 0.05, 0.1, 0.2)),
    StepCheck("rollout_is_catastrophic_token_fraction", (0.001, 0.01, 0.05)),
    StepCheck("clip_ratio_region_mean", (0.1, 0.2, 0.3, 0.5)),
    StepCheck("completions_clipped_ratio", (0.1, 0.2, 0.3, 0.5)),
    StepCheck("frac_reward_zero_std", (0.5, 0.8, 0.9, 0.95)),
)}
"""Checked scalars by catalog key."""
