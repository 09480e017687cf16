"""PromQL over the training process's per-step evidence: step checks and health counters.

    >>> from otel_grpo.generate import RuleSettings
    >>> [r["record"] for r in evidence_rules(RuleSettings(), [("kl_threshold", 3)])]  # doctest: +NORMALIZE_WHITESPACE
    ['run_id_signal_bound:grpo_step_streak:max', 'run_id_signal_bound:grpo_step_beyond:rose',
     'run_id_signal_bound:grpo_step_beyond:new', 'run_id_signal_bound:grpo_step_beyond:increase',
     'run_id_signal_bound:grpo_step_check:beyond']
    >>> held(("kl_threshold",), 3)
    'max without (streak) (run_id_signal_bound:grpo_step_check:beyond{signal="kl", streak="3"})'

`grpo_step_beyond_total{signal, bound, streak}` counts the steps at which a checked
scalar had been beyond `bound` for `streak` consecutive steps (the training
process counts every step, so nothing is lost between scrapes), and
`grpo_step_streak{signal, bound}` is the current streak. "N consecutive steps
over T" is: the counter for (T, N) rose within `counter_window` (fast steps: the
streak may be over by the next scrape) or the current streak is at least N (slow
steps: between two steps the counter does not move). A step within the bound
resets the streak in the trainer, so alternating values never make one.

Each part is a recording rule of the alert group (`evidence_rules`), evaluated before the alerts
that read it, at the same evaluation: the counter's rise (`INCREASE{streak}`), the current streak
(`STREAK_MAX`) and their union (`HELD{streak}`), each for the run's own bound only.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

from otel_grpo.catalog import PROCESS, bound_label

from ._memory import last_record, remembered
from ._rules import NONFINITE, ONE_RANK, SKIPPED, STEP_MAX, STEP_THRESHOLDS, RuleSettings, prometheus_name, promql_string
from ._run_end import WATCHED

BEYOND, STREAK_NOW = prometheus_name("step_beyond"), prometheus_name("step_streak")
BY = "run_id, signal, bound"
ROSE = "run_id_signal_bound:grpo_step_beyond:rose"
"""Label `streak`: the run's counter of that streak length at its bound rose within `counter_window`."""
NEW = "run_id_signal_bound:grpo_step_beyond:new"
"""Label `streak`: that counter is a series first seen within `counter_window` (a new process's), by its value."""
INCREASE = "run_id_signal_bound:grpo_step_beyond:increase"
"""Label `streak`: the run's counter of that streak length at its bound rose within `counter_window` (or is new, in a
run Prometheus watched: `watched`)."""
STREAK_MAX = "run_id_signal_bound:grpo_step_streak:max"
"""The run's current streak beyond its bound."""
HELD = "run_id_signal_bound:grpo_step_check:beyond"
"""Label `streak`: the run's scalar has been beyond its bound for `streak` consecutive steps, lately or now."""


COUNTERS = (BEYOND, NONFINITE, SKIPPED)
"""The training process's event counters the alerts count: each read through its `per_process` record."""
IDENTITY = f"run_id, job, instance, {PROCESS}, signal, bound, streak"
"""What makes one of those counters: the process (its run, target and start) and the counter's own attributes. Not
which collector replica relayed it: a scrape of each replica adds that replica's target labels (the Prometheus
Operator's `pod`, `service`, ...), so a run whose exports move to another replica, or a collector rolled out as a new
pod, shows a second copy of every counter, at its count so far."""


def per_process(metric: str) -> str:
    """The record of a counter (its name, a selector may follow) that holds it once per process: `process:<name>`."""
    name, brace, selector = metric.partition("{")
    return f"process:{name}{brace}{selector}"


def counter_rules(s: RuleSettings, uses: Iterable[tuple[str, int]]) -> list[dict]:
    """One series per process of each event counter: the largest of its copies. The copies are of one cumulative
    count, the later the larger, so the record counts on as if one collector had relayed it all; a copy seen
    anew under another replica is not a new counter, and a count that rose between the last export through one
    replica and the first through another is an increase.

    The step checks' counter only at the bounds and streaks the alerts read (`uses`, as `evidence_rules` takes
    them; one rule per distinct setting): a trainer exports every check at every bound and streak, several
    times what the alerts read, and a record of them all copies each of a team's runs' series into a second
    one at every evaluation (benchmarks/rules_load.py)."""
    beyond = [(f'{BEYOND}{{{sel}, streak="{steps}"}}', {**labels, "streak": str(steps)})
              for field, steps in dict.fromkeys(uses) for sel, labels in _settings(s, field)]
    counters = beyond + [(m, {}) for m in COUNTERS if m != BEYOND]
    counts = [{"record": per_process(m.partition("{")[0]), "expr": f"max by ({IDENTITY}) ({_run_series(m)})",
               **({"labels": l} if l else {})}
              for m, l in counters]
    # Each count's last value within `counter_lookback`: a series new to it is a new counter (`counted_parts`).
    return counts + [remembered(s, per_process(m), s.counter_lookback, l) for m, l in counters]


def _run_series(selector: str) -> str:
    """`selector` of the run's own series (`ONE_RANK`): where every rank exports, each counts the run's events (the
    reduced values' non-finite ones, the skipped updates, the step checks' streaks), which summed by run would count
    once per rank."""
    name, brace, matchers = selector.partition("{")
    return f"{name}{{{ONE_RANK}, {matchers}" if brace else f"{name}{{{ONE_RANK}}}"


def counted_parts(metric: str, by: str, s: RuleSettings) -> tuple[str, str]:
    """Any increase within `counter_window`; a series unseen for `counter_lookback` before it counts by its value.

    Per process (`per_process`: whichever collector replicas relayed it), then summed: each process of a run
    counts in series of its own (attribute `process`), so a resumed process's first counts are a new series even
    where the old process's series (same run, signal) still show, or count the same. No `unless x offset w`
    with a short lookback: after a failed scrape or an outage that would see every counter as
    new again. Its `remembered` record (its last value within the lookback, `_memory`) still finds it, as it
    was `counter_window` ago. A new series counts only through `watched`.
    """
    metric = per_process(metric)
    return (f"sum by ({by}) (increase({metric}[{s.counter_window}])) > 0",
            f"sum by ({by}) ({metric} > 0 unless {last_record(metric)} offset {s.counter_window})")


def watched(new: str) -> str:
    """New counter series (`new`, by run_id) that count: of runs Prometheus watched before they appeared or from
    their start (`WATCHED`). A Prometheus that lost its storage sees every counter of a running process as new,
    and would notify its old events again."""
    return f"{new} and on (run_id) {WATCHED}"


def counted(metric: str, by: str, s: RuleSettings) -> str:
    """`counted_parts` in one expression: the increase, or else a new series by its value (`watched`)."""
    rose, new = counted_parts(metric, by, s)
    return f"{rose} or {watched(new)}"


def regex_literal(text: str) -> str:
    """`text` as a regex (RE2) that matches it alone: its metacharacters escaped."""
    return re.sub(r"([.+*?()\[\]{}|^$\\])", r"\\\1", text)


def selectors(s: RuleSettings, field: str) -> list[str]:
    """Label matchers of a step threshold, one per distinct setting: the default for runs without an
    override of `field`, then each override (a +Inf override: no matcher, the run is never judged)."""
    return [sel for sel, _ in _settings(s, field)]


def _settings(s: RuleSettings, field: str) -> list[tuple[str, dict[str, str]]]:
    """`selectors`, each with the labels its series share: the signal, and an override's run."""
    key = STEP_THRESHOLDS[field]
    own = {run: v[field] for run, v in s.overrides.items() if field in v}
    default = f'signal="{key}", bound="{bound_label(getattr(s, field))}"'
    if own:
        default += f', run_id!~{promql_string("|".join(regex_literal(r) for r in sorted(own)))}'
    return [(default, {"signal": key})] + [(f'signal="{key}", run_id={promql_string(run)}, bound="{bound_label(v)}"',
                                            {"signal": key, "run_id": run})
                                           for run, v in sorted(own.items()) if not math.isinf(v)]


def evidence_rules(s: RuleSettings, uses: Iterable[tuple[str, int]]) -> list[dict]:
    """The recording rules of the step evidence the alerts read, in evaluation order: for each (threshold
    field, consecutive steps) in `uses`, with one rule per distinct setting of the field (`selectors`). Each
    rule's labels are those its series share, so no two rules of a record have the same."""
    uses = list(dict.fromkeys(uses))
    rules = [{"record": STREAK_MAX, "expr": f"max by ({BY}) ({STREAK_NOW}{{{sel}}})", "labels": labels}
             for field in dict.fromkeys(f for f, _ in uses) for sel, labels in _settings(s, field)]
    for field, steps in uses:
        key, streak = STEP_THRESHOLDS[field], f'streak="{steps}"'
        for sel, labels in _settings(s, field):
            rose, new = counted_parts(f"{BEYOND}{{{sel}, {streak}}}", BY, s)
            own = {**labels, "streak": str(steps)}
            # the two parts as records of their own, then `or`: what `counted` gives, in shorter expressions
            either = f"{ROSE}{{{sel}, {streak}}} or {watched(f'{NEW}{{{sel}, {streak}}}')}"
            rules += [{"record": ROSE, "expr": rose, "labels": own}, {"record": NEW, "expr": new, "labels": own},
                      {"record": INCREASE, "expr": either, "labels": own}]
        # One series per run and signal: the counter's where both hold (`or` keeps the left side's).
        rules.append({"record": HELD, "labels": {"signal": key, "streak": str(steps)},
                      "expr": f'max without (streak) ({INCREASE}{{signal="{key}", {streak}}})'
                              f' or {STREAK_MAX}{{signal="{key}"}} >= {steps}'})
    return rules


def held(fields: tuple[str, ...], steps: int) -> str:
    """Runs whose scalar of any of `fields` has been beyond the run's threshold for `steps` consecutive steps,
    by (run_id, signal, bound): lately (the counter) or now (the streak). Reads `evidence_rules` of them."""
    keys = "|".join(STEP_THRESHOLDS[f] for f in fields)
    signal = f'signal="{keys}"' if len(fields) == 1 else f'signal=~"{keys}"'
    return f'max without (streak) ({HELD}{{{signal}, streak="{steps}"}})'


_HELD_READ = re.compile(re.escape(HELD) + r'\{signal=~?"([\w|]+)", streak="(\d+)"\}')


def held_uses(exprs: Iterable[str]) -> list[tuple[str, int]]:
    """The (threshold field, steps) pairs that `exprs` read through `held`, in order: what `evidence_rules` must
    record for them."""
    field_of = {key: f for f, key in STEP_THRESHOLDS.items()}
    return list(dict.fromkeys((field_of[key], int(steps)) for expr in exprs
                              for keys, steps in _HELD_READ.findall(expr) for key in keys.split("|")))


def at_step(cond: str) -> str:
    """`cond`'s series with the run's last step index as value (the alert summary's "step N")."""
    return f"({cond}) * 0 + on (run_id) group_left {STEP_MAX}"


__all__ = ["HELD", "INCREASE", "NEW", "ROSE", "STREAK_MAX", "at_step", "counted", "counted_parts", "counter_rules",
           "evidence_rules", "held", "held_uses", "regex_literal", "selectors", "watched"]
