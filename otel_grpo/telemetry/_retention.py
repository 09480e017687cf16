"""Adaptive retention: every completion of an anomalous step is kept, a small selection otherwise.

    judge = AnomalyJudge(settings)        # rank 0, training thread: once per step, in step order
    reason = judge(scalars, skipped)      # "kl 3.2 above 1" / None
    budget = RowBudget(settings)          # wherever the step's selection runs
    if reason and budget.admit(n_rows): keep every row

A step is anomalous when its update was skipped, when one of its scalars is not finite,
when a watched scalar crosses its threshold (`anomaly_thresholds`: the alert rules' defaults,
or this run's own thresholds from the rule settings file, `rule_settings`; beyond a step
check's bound as the alerts count it, below it for the effective sample size, on the value
the check judges: TRL's logged kl where the step has no grpo.kl; +inf: off),
or when its reward or KL is an outlier against the run's own last `anomaly_window` steps
(robust z-score: distance to the median over 1.4826 x MAD, KL on a log scale). A run that
trains with beta = 0 (the last `beta` it recorded) gets no KL alert, so its KL makes no
step anomalous either. The whole step is then kept while the run's budget of rows kept this way
(`anomaly_rows_budget`) lasts; after that, anomalous steps get the usual top/bottom/random
selection (said once in the log). The verdict is rank 0's and travels with the step's
scores, and every rank counts the same budget: the selection is identical on every rank.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from statistics import median
from typing import Mapping, Sequence

from .. import catalog
from ._settings import TelemetrySettings

logger = logging.getLogger("otel_grpo.telemetry")

# (catalog key, on a log scale, which side is anomalous: +1 high, -1 low, 0 both)
_OUTLIERS = (("reward", False, 0), ("kl", True, 1))
_KL, _BETA = "kl", "beta"  # the alert rules drop every KL alert of a run whose beta is 0
_MAD_TO_SIGMA = 1.4826
_MIN_HISTORY = 5
_REL_FLOOR = 0.05  # spread floor, relative to the median: a constant history is no hair trigger


def _names_of(key: str) -> set[str]:
    """Every name a scalar of catalog `key` may be recorded under (the key, its aliases)."""
    signal = catalog.get(key)
    return {signal.key, signal.name, *signal.all_aliases}


def _below(key: str) -> bool:
    check = catalog.STEP_CHECKS.get(key)
    return check is not None and check.below


def _beyond(key: str, value: float, limit: float) -> bool:
    """Beyond the threshold as the alert counts it (a step check's side, else above); +inf is the
    alerts' "off" (no streak is counted for it) whichever the side."""
    if math.isinf(limit):
        return False
    check = catalog.STEP_CHECKS.get(key)
    return check.beyond(value, limit) if check is not None else value > limit


class AnomalyJudge:
    """Whether a step is anomalous, from its scalars (stat keys or peer names) and the run's history."""

    def __init__(self, settings: TelemetrySettings) -> None:
        self._enabled = settings.keep_anomalous_steps
        self._z = settings.anomaly_z
        self._limits = dict(settings.anomaly_thresholds)
        keys = {*self._limits, *(key for key, _, _ in _OUTLIERS), _BETA}
        # A step check's fallbacks are read too (TRL's kl where a run has no grpo.kl), as the alerts count it.
        # Their names go in first: a name one shares with a key (TRL's `kl` is our `kl`) stays the key's.
        fallbacks = [k for key in keys if key in catalog.STEP_CHECKS for k in catalog.STEP_CHECKS[key].fallbacks]
        self._keys = {name: key for key in (*fallbacks, *keys) for name in _names_of(key)}
        self._history = {key: deque(maxlen=settings.anomaly_window) for key, _, _ in _OUTLIERS}
        self._kl_off = False  # the run's last recorded beta was 0
        self._warned = False

    def __call__(self, scalars: Sequence[Mapping[str, float]], skipped: bool) -> str | None:
        """Why the step is anomalous, or None. Never raises: telemetry must not stop training."""
        if not self._enabled:
            return None
        try:
            return self._judge(scalars, skipped)
        except Exception:  # a bug here costs the step its whole-step retention, said once
            if not self._warned:
                self._warned = True
                logger.warning("otel-grpo: judging a step for retention failed; keeping the usual selection",
                               exc_info=True)
            return None

    def _judge(self, scalars: Sequence[Mapping[str, float]], skipped: bool) -> str | None:
        reasons = ["update skipped"] if skipped else []
        seen: dict[str, float] = {}  # catalog key -> the step's (last) value
        for values in scalars:
            for name, value in values.items():
                if not math.isfinite(value):
                    reasons.append(f"{name} not finite")
                    continue
                key = self._keys.get(name)
                if key is not None:
                    seen[key] = value
        if _BETA in seen:
            self._kl_off = seen[_BETA] == 0
        # a step check's value as the trainer's streaks judge it: its own key's, else a fallback's
        seen.update((check.key, value) for check, value in catalog.judged(seen))
        for key, limit in self._limits.items():  # after the loop: beta may come after KL in the step's scalars
            value = seen.get(key)
            if value is not None and not (key == _KL and self._kl_off) and _beyond(key, value, limit):
                reasons.append(f"{key} {value:.4g} {'below' if _below(key) else 'above'} {limit:g}")
        for key, log, side in _OUTLIERS:
            if key in seen and not (key == _KL and self._kl_off):
                reason = self._outlier(key, seen[key], log, side)
                if reason:
                    reasons.append(reason)
        return "; ".join(dict.fromkeys(reasons)) or None

    def _outlier(self, key: str, value: float, log: bool, side: int) -> str | None:
        """Compare with the last steps, then remember this one (an anomaly too: "recent" moves on)."""
        history = self._history[key]
        x = math.log10(value) if log and value > 0 else (None if log else value)
        reason = None
        if x is not None and len(history) >= _MIN_HISTORY:
            mid = median(history)
            spread = max(_MAD_TO_SIGMA * median(abs(h - mid) for h in history), _REL_FLOOR * abs(mid), 1e-12)
            z = (x - mid) / spread
            if abs(z) > self._z and (side == 0 or z * side > 0):
                reason = f"{key} outlier (z {z:+.1f} over the last {len(history)} steps)"
        if x is not None:
            history.append(x)
        return reason


class RowBudget:
    """The run's rows kept whole for anomalous steps; every rank counts the same rows."""

    def __init__(self, settings: TelemetrySettings) -> None:
        self.left = settings.anomaly_rows_budget
        self._warned = False

    def admit(self, rows: int) -> bool:
        if rows <= self.left:
            self.left -= rows
            return True
        if not self._warned:
            self._warned = True
            logger.warning("otel-grpo: the run's budget of rows kept for anomalous steps (anomaly_rows_budget) "
                           "is spent; anomalous steps now keep the usual selection")
        return False
