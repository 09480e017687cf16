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

The rule settings file (YAML of `RuleSettings` fields, `otel-grpo dashboards --rule-settings`)
is read here too, so that the training process judges a step by the same per-run thresholds
as the alerts (`run_thresholds`; the telemetry's adaptive retention) without importing the stack.

A check may name fallbacks: catalog keys judged in its place at a step that lacks its own
key. TRL logs its own KL estimate as `kl` (catalog `trl_kl`), and a trainer integrated only
through its logs (`OtelGrpoCallback`, `follow --trl-output`, `instrument` outside the
supported TRL) has no plain-k3 `grpo.kl`; the `kl` check then judges `trl_kl`, still as
`signal="kl"`, so the KL alerts read one set of series whichever estimate the run has
(`judged`). A step with both is judged on the check's own key only.

A relative check (`baseline_steps`, the gradient norm) compares each step's value
divided by the median of the run's previous `baseline_steps` values with its bounds
(factors): a spike against the run's own recent history, judged on every step.

Each process counts in series of its own (attribute `process`, its start time): a
resumed run's first counts are new series, which the alerts count whole, so a
resume that repeats the old process's count, or comes after its series went
stale, still shows its first step's events.

    >>> STEP_CHECKS["kl"].bounds[:3]
    (0.1, 0.2, 0.5)
    >>> STEP_CHECKS["rollout_is_eff_sample_size"].below
    True
    >>> [(c.key, v) for c, v in judged({"trl_kl": 0.3, "reward": 1.0})]
    [('kl', 0.3)]
    >>> state = Streaks(StepCheck("x", (2.0,), baseline_steps=4), min_history=2)
    >>> for v in (1.0, 1.0, 1.0, 3.0): state.advance(v)
    >>> state.counts   # 3.0 is 3 times the median of 1.0, 1.0, 1.0
    [1]
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

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
    baseline_steps: int = 0
    """Relative check: the value judged is the scalar over the median of its previous `baseline_steps`
    values (bounds are factors), once `BASELINE_MIN_STEPS` of them are known; 0: the scalar itself."""
    fallbacks: tuple[str, ...] = ()
    """Catalog keys judged in this check's place at a step that lacks `key`, the first one present (a
    trainer's own estimate of the same quantity); its series stay this check's (`signal=key`)."""

    def __post_init__(self) -> None:
        if not self.bounds or list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"{self.key!r}: bounds must be non-empty and strictly increasing")
        if self.baseline_steps < 0:
            raise ValueError(f"{self.key!r}: baseline_steps must be >= 0")
        if self.key in self.fallbacks:
            raise ValueError(f"{self.key!r}: a check is no fallback of itself")

    @property
    def inputs(self) -> tuple[str, ...]:
        """The catalog keys this check may judge, in order of preference."""
        return (self.key, *self.fallbacks)

    def beyond(self, value: float, bound: float) -> bool:
        return value < bound if self.below else value > bound


BASELINE_MIN_STEPS = 20
"""Earlier steps a relative check needs before it judges one (its warm-up, as the trend alerts' 20 steps)."""


class Streaks:
    """The streaks of one checked scalar against each of its bounds, advanced one step at a time.

    The one definition of a streak, shared by the training process (telemetry) and the
    alert tests' replay of recorded runs (otel_grpo.stack).
    """

    __slots__ = ("check", "counts", "_history", "_min")

    def __init__(self, check: StepCheck, min_history: int = BASELINE_MIN_STEPS) -> None:
        self.check = check
        self.counts = [0] * len(check.bounds)
        """Consecutive steps, up to the last one, beyond each bound."""
        self._history: deque[float] | None = deque(maxlen=check.baseline_steps) if check.baseline_steps else None
        self._min = min_history

    def advance(self, value: float) -> None:
        """One step of `value`: each bound's streak grows by one if beyond it, else restarts at 0
        (as it does while a relative check has too short a history to judge)."""
        judged: float | None = value
        if self._history is not None:
            judged = self._relative(value)
            self._history.append(value)
        for i, bound in enumerate(self.check.bounds):
            self.counts[i] = self.counts[i] + 1 if judged is not None and self.check.beyond(judged, bound) else 0

    def _relative(self, value: float) -> float | None:
        history = self._history
        if history is None or len(history) < self._min:
            return None
        median = statistics.median(history)  # ~100 floats: a few microseconds a step
        return value / median if median > 0 else None


PROCESS = "process"
"""Attribute of the alerts' event counters (step evidence, non-finite values, skipped steps): the process."""


def process_id(start_s: float | None = None) -> str:
    """The `process` attribute of a process started at `start_s` (Unix seconds; default now)."""
    return str(int(time.time() if start_s is None else start_s))


def reached(streak: int) -> tuple[int, ...]:
    """The streak lengths of `STREAKS` that a streak has reached (the counters one step adds to)."""
    return tuple(n for n in STREAKS if streak >= n)


def bound_label(bound: float) -> str:
    """The `bound` attribute of a bound, as the alert rules select it: 1.0 -> "1.0", 0.01 -> "0.01"."""
    return repr(float(bound))


STEP_CHECKS: dict[str, StepCheck] = {c.key: c for c in (
    # TRL's logged kl (k3 times the policy ratio under use_bias_correction_kl, TRL's default; close to
    # k3 on-policy) where a run has no plain k3: runs integrated through TRL's logs alone.
    StepCheck("kl", (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0), fallbacks=("trl_kl",)),
    StepCheck("mismatch_k3_kl", (0.001, 0.003, 0.01, 0.03, 0.1)),
    StepCheck("rollout_is_eff_sample_size", (0.2, 0.3, 0.5, 0.7), below=True),
    StepCheck("mismatch_chi2_token", (0.3, 1.0, 3.0)),
    StepCheck("rollout_is_veto_fraction", (0.01, 0.05, 0.1, 0.2)),
    StepCheck("rollout_is_catastrophic_token_fraction", (0.001, 0.01, 0.05)),
    StepCheck("clip_ratio_region_mean", (0.1, 0.2, 0.3, 0.5)),
    StepCheck("completions_clipped_ratio", (0.1, 0.2, 0.3, 0.5)),
    StepCheck("frac_reward_zero_std", (0.5, 0.8, 0.9, 0.95)),
    # The gradient norm against its median over the previous 100 steps: a spike is one step.
    StepCheck("grad_norm", (3.0, 5.0, 10.0, 20.0), baseline_steps=100),
)}
"""Checked scalars by catalog key."""

CHECK_INPUTS: frozenset[str] = frozenset(k for c in STEP_CHECKS.values() for k in c.inputs)
"""Catalog keys some step check judges: its own key or a fallback."""


def judged(values: Mapping[str, float]) -> list[tuple[StepCheck, float]]:
    """The step checks a step's finite values judge, each with the value it judges: its own key's, else its
    first fallback present (`values`: catalog key -> value). The one choice for the trainer's streaks, the
    step histograms and the alert tests' replay."""
    out = []
    for check in STEP_CHECKS.values():
        for key in check.inputs:
            value = values.get(key)
            if value is not None:
                out.append((check, value))
                break
    return out

STEP_THRESHOLDS: dict[str, str] = {
    "kl_threshold": "kl", "mismatch_kl_threshold": "mismatch_k3_kl", "ess_min": "rollout_is_eff_sample_size",
    "chi2_threshold": "mismatch_chi2_token", "veto_fraction_threshold": "rollout_is_veto_fraction",
    "catastrophic_fraction_threshold": "rollout_is_catastrophic_token_fraction",
    "clip_ratio_threshold": "clip_ratio_region_mean", "completions_clipped_threshold": "completions_clipped_ratio",
    "zero_std_threshold": "frac_reward_zero_std", "grad_norm_factor": "grad_norm",
}
"""The alert rules' thresholds that are step checks: `RuleSettings` field -> checked catalog key."""


def load_rule_settings(path: str | Path) -> dict[str, Any]:
    """The rule settings file as a mapping of `RuleSettings` field names; ValueError naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"rule settings {path}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"rule settings {path}: expected a mapping of setting names")
    return data


def run_thresholds(settings: Mapping[str, Any], run_id: str) -> dict[str, float]:
    """The step-check thresholds the alert rules apply to `run_id`, as far as `settings` sets them.

    `settings`: rule settings as a mapping (`load_rule_settings`). Per checked catalog key: the
    run's override (`overrides: {run_id: {kl_threshold: 2.0}}`), else the setting; +inf means the
    run's alerts on that check are off. Thresholds `settings` leaves out keep their defaults.

        >>> run_thresholds({"kl_threshold": 0.5, "overrides": {"exp-42": {"kl_threshold": 2.0}}}, "exp-42")
        {'kl': 2.0}
    """
    overrides = settings.get("overrides") or {}
    own = overrides.get(run_id) if isinstance(overrides, Mapping) else None
    own = own if isinstance(own, Mapping) else {}
    out: dict[str, float] = {}
    for name, key in STEP_THRESHOLDS.items():
        if STEP_CHECKS[key].baseline_steps:
            continue  # a factor over the run's own median, not a bound on the value itself
        value = own.get(name, settings.get(name))
        if value is None:
            continue
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {value!r} is not a number") from None
        if math.isnan(out[key]):
            raise ValueError(f"{name}: {value!r} is not a number")
    return out
