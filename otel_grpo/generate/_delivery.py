"""What Alertmanager sends of the alerts Prometheus fires: the generated config's routing, grouping and inhibitions.

    delivery = Delivery.from_config(yaml.safe_load(Path("alertmanager/alertmanager.yml").read_text()))
    sent = delivery.notifications(firing, end_s=7200.0)  # each alert's first notification, each time it fires

`firing` is what Prometheus sent over time (`_grid_trace.Firing`: the alerts firing from each change on).
Alertmanager, as the config says and 0.34 does it:

- routes each alert to the first child route whose matchers all match (else the root's receiver), into
  the aggregation group of its route and `group_by` labels; a group is created by its first alert and
  ends at the flush that finds all its alerts resolved;
- flushes a new group `group_wait` after it was created, then every `group_interval`;
- at each flush drops the alerts an `inhibit_rules` entry mutes: an alert matching the target matchers is
  muted while an alert matching the source matchers fires with the same values of the `equal` labels (a
  label missing on both sides counts as equal); where the alert matches the source matchers too, sources
  that also match the target matchers do not count (an alert never inhibits itself, nor its peers);
- sends, in a flush, the alerts that fire, are not muted and were not sent in the group before: an alert
  notified once is not notified again while it fires (repeats are out of scope), a resolved one leaves
  the group at the next flush and is new when it fires again.

So a warning that fires while a critical alert of its run inhibits it is sent at the first flush after the
critical alert resolved, and never if it resolves first. The rules, the matchers and the timings are read
from the config, never restated here; a config using what this model does not reproduce (nested routes,
`continue`, per-route grouping) is refused with a ValueError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ._grid_trace import Firing, Labels, duration_s

_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$')


@dataclass(frozen=True, slots=True)
class Matcher:
    """One Alertmanager label matcher: `name="v"`, `name!="v"`, `name=~"re"`, `name!~"re"` (regexes anchored)."""

    name: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> "Matcher":
        m = _MATCHER.match(text)
        if m is None:
            raise ValueError(f"matcher {text!r}: expected name=\"value\" with =, !=, =~ or !~")
        return cls(m.group(1), m.group(2), re.sub(r"\\(.)", r"\1", m.group(3)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.name, "")  # a missing label is the empty string, as in Alertmanager
        if self.op in ("=", "!="):
            return (value == self.value) == (self.op == "=")
        return (re.fullmatch(self.value, value) is not None) == (self.op == "=~")


def _all(matchers: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


@dataclass(frozen=True, slots=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    def muted(self, firing: Sequence[Mapping[str, str]]) -> set[int]:
        """Which of the alerts `firing` (their labels) this rule mutes while they all fire: their indexes."""
        sources = [s for s in firing if _all(self.source, s)]
        if not sources:
            return set()
        out = set()
        for i, alert in enumerate(firing):
            if not _all(self.target, alert):
                continue
            two_sided = _all(self.source, alert)  # then sources that are targets too do not count
            if any(not (two_sided and _all(self.target, s))
                   and all(s.get(n, "") == alert.get(n, "") for n in self.equal) for s in sources):
                out.add(i)
        return out


@dataclass(frozen=True, slots=True)
class Notification:
    """An alert's first notification to a receiver while it fires."""

    labels: Labels
    receiver: str
    sent_s: float
    """The flush that sent it."""
    since_s: float
    """Since when it had fired without being muted when it was sent: when it started firing, or when what
    inhibited it stopped."""

    @property
    def alertname(self) -> str:
        return dict(self.labels).get("alertname", "")


@dataclass(slots=True)
class _Group:
    receiver: str
    next_s: float
    alerts: dict[Labels, bool] = field(default_factory=dict)
    """Labels -> whether it fires (False: resolved, to leave at the next flush)."""
    sent: set[Labels] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Delivery:
    """An Alertmanager config's routing, grouping, timings and inhibit rules (`from_config`)."""

    routes: tuple[tuple[tuple[Matcher, ...], str], ...]
    """(matchers, receiver) of the root's child routes, in order."""
    receiver: str
    """The root's receiver: alerts no child route matches."""
    group_by: tuple[str, ...]
    group_wait_s: float
    group_interval_s: float
    inhibit_rules: tuple[InhibitRule, ...]

    @classmethod
    def from_config(cls, config: Mapping) -> "Delivery":
        """From an `alertmanager.yml` as a dict; ValueError naming what this model does not reproduce."""
        root = config.get("route") or {}
        own = ("group_by", "group_wait", "group_interval", "routes", "continue")
        for child in root.get("routes", []):
            if any(k in child for k in own) or "match" in child or "match_re" in child:
                raise ValueError(f"config: route {child} sets {[k for k in child if k in own + ('match', 'match_re')]}"
                                 ": only flat routes with `matchers` that inherit the root's grouping are modelled")
        if "..." in root.get("group_by", []):
            raise ValueError("config: group_by [...] is not modelled")
        return cls(
            routes=tuple((tuple(map(Matcher.parse, r.get("matchers", []))), r["receiver"])
                         for r in root.get("routes", [])),
            receiver=root["receiver"], group_by=tuple(root.get("group_by", [])),
            group_wait_s=duration_s(root.get("group_wait", "30s")),
            group_interval_s=duration_s(root.get("group_interval", "5m")),
            inhibit_rules=tuple(InhibitRule(tuple(map(Matcher.parse, r.get("source_matchers", []))),
                                            tuple(map(Matcher.parse, r.get("target_matchers", []))),
                                            tuple(r.get("equal", [])))
                                for r in config.get("inhibit_rules", [])))

    def route(self, labels: Mapping[str, str]) -> str:
        """The receiver of an alert with these labels."""
        return next((receiver for matchers, receiver in self.routes if _all(matchers, labels)), self.receiver)

    def muted(self, firing: Sequence[Mapping[str, str]]) -> set[int]:
        """Which of the alerts `firing` (their labels) the inhibit rules mute while they all fire: their indexes."""
        return set().union(*(r.muted(firing) for r in self.inhibit_rules))

    def notifications(self, firing: Firing, end_s: float) -> list[Notification]:
        """Every alert's first notification each time it fires, from Prometheus' `firing` up to `end_s`, in the
        order they are sent."""
        out: list[Notification] = []
        groups: dict[tuple, _Group] = {}
        clear: dict[Labels, float] = {}  # firing and not muted: since when
        changes = [(at, now) for at, now in firing if at <= end_s]
        i = 0
        while True:
            flush = min((g.next_s for g in groups.values()), default=end_s + 1)
            if i < len(changes) and changes[i][0] <= flush:  # an evaluation's alerts arrive before a flush then
                at, now = changes[i]
                i += 1
                for labels in now:
                    key = self._group_key(labels)
                    group = groups.get(key)
                    if group is None:
                        group = groups[key] = _Group(self.route(dict(labels)), at + self.group_wait_s)
                    group.alerts[labels] = True
                for group in groups.values():
                    for labels in group.alerts:
                        group.alerts[labels] = labels in now
                alerts = sorted(now)
                muted = self.muted([dict(labels) for labels in alerts])
                clear = {labels: clear.get(labels, at) for k, labels in enumerate(alerts) if k not in muted}
                continue
            if flush > end_s:
                return out
            for key, group in list(groups.items()):
                if group.next_s != flush:
                    continue
                for labels, fires in group.alerts.items():
                    if fires and labels in clear and labels not in group.sent:
                        group.sent.add(labels)
                        out.append(Notification(labels, group.receiver, flush, clear[labels]))
                for labels in [a for a, fires in group.alerts.items() if not fires]:
                    del group.alerts[labels]
                    group.sent.discard(labels)
                if group.alerts:
                    group.next_s = flush + self.group_interval_s
                else:
                    del groups[key]

    def _group_key(self, labels: Labels) -> tuple:
        d = dict(labels)
        return (self.route(d),) + tuple(d.get(n, "") for n in self.group_by)


__all__ = ["Delivery", "InhibitRule", "Matcher", "Notification"]
