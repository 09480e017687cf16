"""The shape of one catalog entry and the naming rules shared by both export modes."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Kind(str, enum.Enum):
    """OpenTelemetry instrument kind a signal is exported as."""

    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    COUNTER = "counter"


class Reduction(str, enum.Enum):
    """How a signal's per-rank partial aggregates combine into the global value.

    MEAN: sum and count are summed across ranks, value = sum / count (token- or
    sequence-weighted, whichever the signal's description says).
    STD: sum, sum of squares and count are summed, value = sqrt(E[x^2] - E[x]^2).
    MIN / MAX: true min / max over every element of every rank.
    SUM: summed across ranks.
    QUANTILE: computed from the gathered per-sample vector.
    DERIVED: computed from other finalized aggregates (ESS, ppl ratio, ...).
    SAMPLES: the gathered per-sample vector itself (histograms).
    HOST: a host-side scalar the loop already has (learning rate, step time).
    """

    MEAN = "mean"
    STD = "std"
    MIN = "min"
    MAX = "max"
    SUM = "sum"
    QUANTILE = "quantile"
    DERIVED = "derived"
    SAMPLES = "samples"
    HOST = "host"


class Group(str, enum.Enum):
    """Dashboard row / web-page section a signal belongs to."""

    REWARD = "reward"
    ADVANTAGE = "advantage"
    POLICY = "policy"
    KL = "kl"
    MISMATCH = "mismatch"
    ROLLOUT_IS = "rollout_is"
    LENGTH = "length"
    OPTIM = "optim"
    THROUGHPUT = "throughput"
    HEALTH = "health"
    MAXENT = "maxent"
    TRL_LOGGED = "trl_logged"


# Units that the two Prometheus paths (collector exporter, Python PrometheusMetricReader)
# render differently. "1" gets `_ratio` appended by the collector only.
_FORBIDDEN_UNITS = frozenset({"1", ""})
_UNIT_RE = re.compile(r"^(\{[a-z_]+\}|s|By)$")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_NAME_RE = re.compile(r"^grpo(\.[a-z][a-z0-9_]*)+$")
_PEERS = ("trl", "verl", "maxent", "other")


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal: what it means, how it is exported, and what users already call it.

    `label` marks a templated signal: one instrument whose data points carry an
    attribute of that name (for example one `grpo.reward_fn.mean` gauge with a
    `reward_fn` attribute per reward function). Its TRL/verl aliases contain
    `{label}` as a placeholder, e.g. `rewards/{reward_fn}/mean`.
    """

    key: str
    """snake_case identifier used in stats dicts and the sidecar's step history."""
    name: str
    """OpenTelemetry instrument name, dotted, `grpo.` prefix."""
    kind: Kind
    unit: str
    """UCUM unit: `s` for seconds, braced annotations for dimensionless values."""
    description: str
    reduction: Reduction
    group: Group
    trl: str | None = None
    """The name TRL's GRPOTrainer logs this under, if any."""
    verl: str | None = None
    """The name verl logs this under, if any."""
    label: str | None = None
    buckets: tuple[float, ...] | None = None
    """Explicit histogram bucket boundaries (histograms only)."""
    maxent: str | None = None
    """The name the MaxEnt-GRPO metrics module (seed 000) logs this under, `train/` included."""
    aliases: tuple[str, ...] = ()
    """Further names that resolve here: the seed-004 mismatch helper's `mismatch/*`, TRL's PPO names, MaxEnt duplicates."""
    attributes: tuple[str, ...] = ()
    """Attributes its data points carry besides the run's and `label` (a step check's `signal` and `bound`): labels
    a query must keep apart, or ignore where it matches the series with the run's own (the dashboards'
    liveness match)."""
    differs: tuple[tuple[str, str], ...] = ()
    """(peer, how) for each of `trl`, `verl`, `maxent` and `other` (the `aliases`) whose value is not
    computed as ours; a peer with an alias and no entry here computes the same number
    (docs/signals.md says "same")."""

    def __post_init__(self) -> None:
        if not _KEY_RE.match(self.key):
            raise ValueError(f"key {self.key!r} is not snake_case")
        if not _NAME_RE.match(self.name):
            raise ValueError(f"name {self.name!r} must be dotted and start with 'grpo.'")
        if self.unit in _FORBIDDEN_UNITS or not _UNIT_RE.match(self.unit):
            raise ValueError(
                f"unit {self.unit!r} of {self.key!r}: use 's', 'By' or a braced annotation like '{{ratio}}'"
            )
        if (self.kind is Kind.HISTOGRAM) != (self.buckets is not None):
            raise ValueError(f"{self.key!r}: buckets are required for histograms and only for them")
        if self.buckets is not None and list(self.buckets) != sorted(set(self.buckets)):
            raise ValueError(f"{self.key!r}: buckets must be strictly increasing")
        for alias in self.all_aliases:
            if ("{" in alias) != (self.label is not None):
                raise ValueError(f"{self.key!r}: alias {alias!r} and label {self.label!r} disagree")
        for peer, how in self.differs:
            if peer not in _PEERS or not how:
                raise ValueError(f"{self.key!r}: differs entries are (peer in {_PEERS}, how), got {(peer, how)!r}")

    @property
    def point_labels(self) -> tuple[str, ...]:
        """Every attribute its data points carry besides the run's: `label`, then `attributes`."""
        return ((self.label,) if self.label else ()) + self.attributes

    @property
    def all_aliases(self) -> tuple[str, ...]:
        """Every peer name that resolves to this signal: trl, verl, maxent, then `aliases`."""
        return tuple(a for a in (self.trl, self.verl, self.maxent) if a) + self.aliases

    def difference(self, peer: str) -> str | None:
        """How `peer`'s value differs from ours, or None when it is the same number."""
        return dict(self.differs).get(peer)

    @property
    def prometheus_name(self) -> str:
        """The series name Prometheus shows, identical in compose and local mode.

        Dots become underscores, seconds append `_seconds`, counters append
        `_total`; braced units are dropped by both exporters. Histograms are
        queried through the `_bucket`, `_sum` and `_count` suffixes of this name.
        """
        base = self.name.replace(".", "_")
        if self.unit == "s":
            base += "_seconds"
        elif self.unit == "By":
            base += "_bytes"
        if self.kind is Kind.COUNTER:
            base += "_total"
        return base


def sanitize_key(name: str) -> str:
    """Turn an arbitrary metric name (`train/foo-bar`) into a snake_case key (`train_foo_bar`).

    Used for keys the catalog does not know, so that they still export as gauges
    with a valid OpenTelemetry and Prometheus name.
    """
    key = re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")
    if not key:
        raise ValueError(f"name {name!r} has no usable characters")
    if key[0].isdigit():
        key = "m_" + key
    return key
