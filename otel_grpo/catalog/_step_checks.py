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

A relative check (`baseline`) judges a statistic of each step's value against the run's
own previous values instead of the value itself: the gradient norm over its median (a
spike), KL's robust z-score (a jump), the reward's drop in standard deviations (a
collapse), entropy and throughput over their mean. The baseline is counted in steps, never
in time, so a run of 30-minute steps is judged from the same step as one of 2-second steps
(`Baseline.min_steps`). While a check holds, the steps of its streak stay out of the baseline
(up to `gap` of them): the streak an alert waits for is never part of the baseline it is judged
against, yet a change that lasts becomes the run's new normal. A check's name (its `signal`
attribute) may differ from the catalog key it reads: `kl_jump` reads `kl`.

Each process counts in series of its own (attribute `process`, its start time): a
resumed run's first counts are new series, which the alerts count whole, so a
resume that repeats the old process's count, or comes after its series went
stale, still shows its first step's events.

    >>> STEP_CHECKS["kl"].bounds[:3]
    (0.1, 0.2, 0.5)
    >>> STEP_CHECKS["rollout_is_eff_sample_size"].below
    True
    >>> [(c.name, v) for c, v in judged({"trl_kl": 0.3, "reward": 1.0})]
    [('kl', 0.3), ('kl_jump', 0.3), ('reward_collapse', 1.0)]
    >>> state = Streaks(StepCheck("x", (2.0,), baseline=Baseline("ratio_to_median", steps=4, min_steps=2)))
    >>> for v in (1.0, 1.0, 1.0, 3.0): state.advance(v)
    >>> state.counts   # 3.0 is 3 times the median of 1.0, 1.0, 1.0
    [1]
    >>> STEP_CHECKS["kl_jump"].key, STEP_CHECKS["kl_jump"].baseline.min_steps
    ('kl', 8)
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

STREAKS: tuple[int, ...] = (1, 2, 3, 5, 10)
"""Streak lengths counted by `grpo.step.beyond` (its `streak` attribute): the N an alert may ask for."""


def _ratio_to_median(value: float, base: list[float]) -> float | None:
    median = statistics.median(base)
    return value / median if median > 0 else None


def _ratio_to_mean(value: float, base: list[float]) -> float | None:
    mean = statistics.fmean(base)
    return value / mean if mean > 0 else None


KL_JUMP_FACTOR = 2.0
"""A KL jump must also reach this multiple of the baseline's 90th percentile: a KL that creeps up steadily (0.02
to 0.14 over an hour) moves many robust deviations against a tight baseline, yet never doubles its recent highs."""


def _jump_zscore(value: float, base: list[float]) -> float | None:
    """Robust standard deviations above the baseline median, 0 below `KL_JUMP_FACTOR` x its 90th percentile.

    Median and IQR rather than mean and std: one absurd step (a 1e11 KL the step a learning rate
    explodes) in the baseline would inflate a std so much that no later jump counts. 0.741 IQR
    estimates a normal std; the divisor is floored by 10 % of the median plus 0.005, so a flat baseline
    does not turn every wiggle into an infinite z-score, nor the first steps' climb from KL 0 into jumps."""
    q = statistics.quantiles(base, n=20, method="inclusive")  # 5 % steps: q[4] = 25th, q[14] = 75th, q[17] = 90th
    median = statistics.median(base)
    if value <= KL_JUMP_FACTOR * q[17]:
        return 0.0
    return (value - median) / (0.741 * (q[14] - q[4]) + 0.1 * abs(median) + 0.005)


REWARD_MIN_DROP = 0.1
"""A reward collapse is also a drop of at least this much below the baseline mean (rewards of a few hundredths)."""


def _drop_zscore(value: float, base: list[float]) -> float | None:
    """Standard deviations of the step-to-step noise (plus 0.05, so a flat baseline is no hair trigger) below the
    baseline mean; 0 for a drop under `REWARD_MIN_DROP`.

    The noise is estimated from successive differences (von Neumann: the mean squared difference is twice
    the variance), not the baseline's spread: a run that learns climbs, and a climb of 0.4 over the baseline
    would pass for noise and hide the collapse that follows it."""
    mean = statistics.fmean(base)
    if mean - value <= REWARD_MIN_DROP:
        return 0.0
    noise = math.sqrt(sum((b - a) ** 2 for a, b in zip(base, base[1:])) / (2 * (len(base) - 1)))
    return (mean - value) / (noise + 0.05)


STATISTICS = {"ratio_to_median": _ratio_to_median, "ratio_to_mean": _ratio_to_mean,
              "jump_zscore": _jump_zscore, "drop_zscore": _drop_zscore}
"""What a relative check judges of a step's value against its baseline (the run's earlier values)."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The run's own earlier values a relative check judges a step against, counted in steps."""

    statistic: str
    """A name of `STATISTICS`: the value judged, from the step's value and the baseline's."""
    steps: int
    """The baseline holds at most this many values ..."""
    min_steps: int
    """... and judges nothing before it holds this many (the warm-up: a process's first `min_steps` steps are not
    judged, their streaks stay 0)."""
    gap: int = 0
    """The latest values of a streak (beyond some bound) left out of it, at most: a change lasting up to this many
    steps is not yet its own baseline."""

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic: {self.statistic!r} is none of {sorted(STATISTICS)}")
        if not 2 <= self.min_steps <= self.steps or self.gap < 0:
            raise ValueError("baseline: need 2 <= min_steps <= steps and gap >= 0")

    def judge(self, value: float, history: deque[float], held: int) -> float | None:
        """The value judged at a step of `value` after `history` (the earlier values, newest last), the latest
        `held` of which are a streak's; None: too few earlier values, or no finite statistic."""
        end = len(history) - held
        if end < self.min_steps:
            return None
        base = list(history)[max(0, end - self.steps):end]
        return STATISTICS[self.statistic](value, base)


@dataclass(frozen=True, slots=True)
class StepCheck:
    """One checked scalar: the bounds it is compared with on every step."""

    key: str
    """Catalog key of the scalar."""
    bounds: tuple[float, ...]
    """Thresholds the streaks are kept for (each one a series set: keep them few)."""
    below: bool = False
    """Beyond means below the bound (an effective sample size), not above it."""
    baseline: Baseline | None = None
    """Relative check: what is judged is `baseline.statistic` of the value against the run's earlier values (the
    bounds are factors or z-scores); None: the value itself."""
    fallbacks: tuple[str, ...] = ()
    """Catalog keys judged in this check's place at a step that lacks `key`, the first one present (a
    trainer's own estimate of the same quantity); its series stay this check's (`signal=name`)."""
    name: str = ""
    """The check's name, its series' `signal` attribute; default: `key`."""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.key)
        if not self.bounds or list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"{self.name!r}: bounds must be non-empty and strictly increasing")
        if self.key in self.fallbacks:
            raise ValueError(f"{self.name!r}: a check is no fallback of itself")

    @property
    def inputs(self) -> tuple[str, ...]:
        """The catalog keys this check may judge, in order of preference."""
        return (self.key, *self.fallbacks)

    def beyond(self, value: float, bound: float) -> bool:
        return value < bound if self.below else value > bound


class Streaks:
    """The streaks of one checked scalar against each of its bounds, advanced one step at a time.

    The one definition of a streak, shared by the training process (telemetry) and the
    alert tests' replay of recorded runs (otel_grpo.stack).
    """

    __slots__ = ("check", "counts", "_history", "_held")

    def __init__(self, check: StepCheck) -> None:
        self.check = check
        self.counts = [0] * len(check.bounds)
        """Consecutive steps, up to the last one, beyond each bound."""
        b = check.baseline
        self._history: deque[float] | None = deque(maxlen=b.steps + b.gap) if b else None
        self._held = 0  # the latest values of the history that were beyond a bound (at most `gap`)

    def advance(self, value: float) -> None:
        """One step of `value`: each bound's streak grows by one if beyond it, else restarts at 0
        (as it does while a relative check's baseline is too short to judge)."""
        judged: float | None = value
        baseline = self.check.baseline
        if baseline is not None:
            judged = baseline.judge(value, self._history, self._held)  # ~100 floats: microseconds a step
            self._history.append(value)
        for i, bound in enumerate(self.check.bounds):
            self.counts[i] = self.counts[i] + 1 if judged is not None and self.check.beyond(judged, bound) else 0
        if baseline is not None:
            self._held = min(self._held + 1, baseline.gap) if any(self.counts) else 0


PROCESS = "process"
"""Attribute of the alerts' event counters (step evidence, non-finite values, skipped steps): the process."""

END_WAIT_S = 75.0
"""How long a finished or preempted process waits, at most, for its end to reach Prometheus (a scrape of its
endpoint, a collector that takes its last export again): the telemetry's `prometheus_linger_s` by default, and
what the alert model's replay counts on."""
END_GONE_AFTER_S = 60.0
"""A collector that took none of a process's exports for this long (and two export intervals) before its end is
gone, not restarting: the end does not wait for it (the longest scrape interval; the replay models it too)."""

STOPS_TRAINING = ("loss", "grad_norm")
"""Signals whose non-finite value breaks the update itself: GRPONonFiniteValues pages for these (any other signal
notifies), and the trainer counts their non-finite values from its start, at 0 until one (`grpo.nonfinite`)."""


def process_id(start_s: float | None = None) -> str:
    """The `process` attribute of a process started at `start_s` (Unix seconds; default now)."""
    return str(int(time.time() if start_s is None else start_s))


def reached(streak: int) -> tuple[int, ...]:
    """The streak lengths of `STREAKS` that a streak has reached (the counters one step adds to)."""
    return tuple(n for n in STREAKS if streak >= n)


def bound_label(bound: float) -> str:
    """The `bound` attribute of a bound, as the alert rules select it: 1.0 -> "1.0", 0.01 -> "0.01"."""
    return repr(float(bound))


TREND = {"steps": 30, "min_steps": 8, "gap": 5}
"""The trend checks' baseline: up to 30 earlier steps, but the latest 5 while they are a streak (a 3- or 5-step
streak is never its own baseline); judged from a process's 9th step on, whatever its step time."""

STEP_CHECKS: dict[str, StepCheck] = {c.name: c for c in (
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
    StepCheck("entropy", (0.001, 0.01, 0.05), below=True),
    # The gradient norm against its median over the previous 100 steps: a spike is one step.
    StepCheck("grad_norm", (3.0, 5.0, 10.0, 20.0), baseline=Baseline("ratio_to_median", steps=100, min_steps=10)),
    # Trends: each step against the run's own recent steps (`TREND`).
    StepCheck("kl", (3.0, 4.0, 6.0, 10.0), baseline=Baseline("jump_zscore", **TREND), fallbacks=("trl_kl",),
              name="kl_jump"),
    StepCheck("reward", (2.0, 3.0, 5.0), baseline=Baseline("drop_zscore", **TREND), name="reward_collapse"),
    StepCheck("entropy", (0.1, 0.25, 0.5), below=True, baseline=Baseline("ratio_to_mean", **TREND),
              name="entropy_collapse"),
    StepCheck("tokens_per_second", (0.25, 0.5, 0.75), below=True, baseline=Baseline("ratio_to_mean", **TREND),
              name="throughput_drop"),
)}
"""Checked scalars by check name."""

TRENDS: tuple[str, ...] = tuple(c.name for c in STEP_CHECKS.values()
                                if c.baseline is not None and c.baseline == replace(c.baseline, **TREND))
"""The trend checks (judged against the `TREND` baseline): kl_jump, reward_collapse, entropy_collapse, throughput_drop."""

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
    "zero_std_threshold": "frac_reward_zero_std", "grad_norm_factor": "grad_norm", "entropy_floor": "entropy",
    "kl_zscore": "kl_jump", "reward_zscore": "reward_collapse", "entropy_fraction": "entropy_collapse",
    "throughput_fraction": "throughput_drop",
}
"""The alert rules' thresholds that are step checks: `RuleSettings` field -> check name."""


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
        if STEP_CHECKS[key].baseline:
            continue  # a statistic against the run's own history, not a bound on the value itself
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
