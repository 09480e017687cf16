"""PromQL over the training process's per-step evidence: step checks and health counters.

    >>> from otel_grpo.generate import RuleSettings
    >>> 'streak="3"' in beyond(RuleSettings(), "kl_threshold", 3)
    True

`grpo_step_beyond_total{signal, bound, streak}` counts the steps at which a checked
scalar had been beyond `bound` for `streak` consecutive steps (the training
process counts every step, so nothing is lost between scrapes), and
`grpo_step_streak{signal, bound}` is the current streak. "N consecutive steps
over T" is: the counter for (T, N) rose within `counter_window` (fast steps: the
streak may be over by the next scrape) or the current streak is at least N (slow
steps: between two steps the counter does not move). A step within the bound
resets the streak in the trainer, so alternating values never make one.
"""

from __future__ import annotations

import math
import re

from otel_grpo.catalog import bound_label

from ._rules import STEP_INDEX, STEP_THRESHOLDS, RuleSettings, prometheus_name

BEYOND, STREAK_NOW = prometheus_name("step_beyond"), prometheus_name("step_streak")
BY = "run_id, signal, bound"


def counted(metric: str, by: str, s: RuleSettings) -> str:
    """Any increase within `counter_window`; a series unseen for `counter_lookback` before it counts by its value.

    Per series, then summed: each process of a run counts in series of its own (attribute
    `process`), so a resumed process's first counts are a new series even where the old
    process's series (same run, signal) still show, or count the same. No `unless x offset w`
    with a short lookback: after a failed scrape or an outage that would see every counter as
    new again. `last_over_time` over the lookback still finds its last value.
    """
    return (f"sum by ({by}) (increase({metric}[{s.counter_window}])) > 0"
            f" or sum by ({by}) ({metric} > 0"
            f" unless last_over_time({metric}[{s.counter_lookback}] offset {s.counter_window}))")


def _literal(text: str) -> str:
    """`text` as a regex inside a PromQL string: metacharacters escaped, the backslash doubled for the string."""
    return re.sub(r"([.+*?()\[\]{}|^$\\])", r"\\\\\1", text)


def selectors(s: RuleSettings, field: str) -> list[str]:
    """Label matchers of a step threshold, one per distinct setting: the default for runs without an
    override of `field`, then each override (a +Inf override: no matcher, the run is never judged)."""
    key = STEP_THRESHOLDS[field]
    own = {run: v[field] for run, v in s.overrides.items() if field in v}
    default = f'signal="{key}", bound="{bound_label(getattr(s, field))}"'
    if own:
        default += f', run_id!~"{"|".join(_literal(r) for r in sorted(own))}"'
    return [default] + [f'signal="{key}", run_id="{run}", bound="{bound_label(v)}"'
                        for run, v in sorted(own.items()) if not math.isinf(v)]


def beyond(s: RuleSettings, field: str, steps: int) -> str:
    """Runs whose scalar of `field` has been beyond the run's threshold for `steps` consecutive steps,
    by (run_id, signal, bound): lately (the counter) or now (the streak)."""
    parts = []
    for sel in selectors(s, field):
        counter = f'{BEYOND}{{{sel}, streak="{steps}"}}'
        parts.append(f"({counted(counter, BY, s)}) or (max by ({BY}) ({STREAK_NOW}{{{sel}}}) >= {steps})")
    return " or ".join(f"({p})" for p in parts)


def at_step(cond: str) -> str:
    """`cond`'s series with the run's last step index as value (the alert summary's "step N")."""
    return f"({cond}) * 0 + on (run_id) group_left max by (run_id) ({STEP_INDEX})"


__all__ = ["at_step", "beyond", "counted", "selectors"]
