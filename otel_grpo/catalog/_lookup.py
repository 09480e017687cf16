"""Finding signals by key, OTel name or a TRL / verl / MaxEnt-GRPO metric name."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping

from ._signal import Signal
from ._table import SIGNALS, VERL_ALIASES

_BY_KEY: Mapping[str, Signal] = {s.key: s for s in SIGNALS}
_BY_NAME: Mapping[str, Signal] = {s.name: s for s in SIGNALS}
if len(_BY_KEY) != len(SIGNALS) or len(_BY_NAME) != len(SIGNALS):
    raise RuntimeError("catalog keys and names must be unique")

# Exact aliases map straight to a key; templated ones ("rewards/{reward_fn}/mean")
# become regexes whose one group is the label's value.
_EXACT_ALIASES: dict[str, Signal] = {}
_TEMPLATE_ALIASES: list[tuple[re.Pattern[str], Signal]] = []
for _s in SIGNALS:
    for _alias in _s.all_aliases:
        if _s.label:
            pattern = re.escape(_alias).replace(re.escape("{" + _s.label + "}"), r"([^/]+)")
            _TEMPLATE_ALIASES.append((re.compile(f"^{pattern}$"), _s))
        else:
            _EXACT_ALIASES[_alias] = _s
for _alias, _key in VERL_ALIASES.items():  # names verl 0.9.1 uses besides a signal's own `verl`
    _EXACT_ALIASES.setdefault(_alias, _BY_KEY[_key])


def get(key: str) -> Signal:
    """The signal with this key; `KeyError` naming it if there is none."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no catalog signal with key {key!r}") from None


def by_name(name: str) -> Signal | None:
    """The signal with this OpenTelemetry instrument name, if any."""
    return _BY_NAME.get(name)


def split_stat_key(stat_key: str) -> tuple[str, str | None]:
    """`"reward_fn_mean/format"` -> `("reward_fn_mean", "format")`; `"kl"` -> `("kl", None)`.

    Templated signals appear in stats dicts and step histories once per label
    value, as `<key>/<value>`.
    """
    key, sep, value = stat_key.partition("/")
    return key, (value if sep else None)


def resolve(name: str) -> tuple[Signal, dict[str, str]] | None:
    """Map a stats key, a TRL name or a verl name to its signal and data-point attributes.

    >>> resolve("clip_ratio/low_mean")[0].key
    'clip_ratio_low_mean'
    >>> resolve("rewards/format/mean")[1]
    {'reward_fn': 'format'}

    Returns None for names the catalog does not know.
    """
    found = _resolve(name)
    return None if found is None else (found[0], dict(found[1]))


@lru_cache(maxsize=4096)  # log_metrics resolves the same few hundred names every step
def _resolve(name: str) -> tuple[Signal, dict[str, str]] | None:
    key, value = split_stat_key(name)
    signal = _BY_KEY.get(key)
    if signal is not None and (value is None) == (signal.label is None):
        return signal, ({signal.label: value} if signal.label and value else {})
    if name in _EXACT_ALIASES:
        return _EXACT_ALIASES[name], {}
    for pattern, signal in _TEMPLATE_ALIASES:
        match = pattern.match(name)
        if match:
            return signal, {signal.label: match.group(1)}  # type: ignore[dict-item]
    return None
