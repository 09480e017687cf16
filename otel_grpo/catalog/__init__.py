"""The one table of every GRPO signal: key, OpenTelemetry name, kind, unit, reduction, aliases.

Instruments, Prometheus names, dashboards, alert rules and docs all derive from
or are checked against `SIGNALS`.

    >>> from otel_grpo import catalog
    >>> catalog.get("kl").prometheus_name
    'grpo_kl'
    >>> catalog.resolve("completions/clipped_ratio")[0].key
    'completions_clipped_ratio'
"""

from ._lookup import PEERS, by_name, get, resolve, split_stat_key, stat_key
from ._signal import Group, Kind, Reduction, Signal, sanitize_key
from ._table import SIGNALS

__all__ = [
    "PEERS",
    "SIGNALS",
    "Group",
    "Kind",
    "Reduction",
    "Signal",
    "by_name",
    "get",
    "resolve",
    "sanitize_key",
    "split_stat_key",
    "stat_key",
]
