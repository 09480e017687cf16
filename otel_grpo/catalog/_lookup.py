"""Finding signals by key, OTel name or a TRL / verl / MaxEnt-GRPO metric name."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping

from ._signal import Signal, sanitize_key
from ._table import SIGNALS, TRAINER_STATE, VERL_ALIASES

_BY_KEY: Mapping[str, Signal] = {s.key: s for s in SIGNALS}
_BY_NAME: Mapping[str, Signal] = {s.name: s for s in SIGNALS}
if len(_BY_KEY) != len(SIGNALS) or len(_BY_NAME) != len(SIGNALS):
    raise RuntimeError("catalog keys and names must be unique")

PEERS = ("trl", "verl", "maxent")
"""The `source` values of `resolve`: whose names a metrics dict uses."""
EVAL_KEY = "eval_metric"
"""An evaluation's metric (`grpo.eval`), its name in attribute `metric`."""
STEP_KEY = "step"
"""The run's step index (`grpo.step_index`): training records move it."""

Templates = list[tuple["re.Pattern[str]", Signal]]


def _template(alias: str, label: str) -> re.Pattern[str]:
    """`rewards/{reward_fn}/mean` -> a regex whose one group is the label's value (slashes allowed:
    a reward model named `org/model` logs `rewards/org/model/mean`)."""
    return re.compile("^" + re.escape(alias).replace(re.escape("{" + label + "}"), "(.+)") + "$")


def _tables(names: dict[Signal, tuple[str, ...]]) -> tuple[dict[str, Signal], Templates]:
    exact: dict[str, Signal] = {}
    templates: Templates = []
    for signal, aliases in names.items():
        for alias in aliases:
            if signal.label:
                templates.append((_template(alias, signal.label), signal))
            else:
                exact.setdefault(alias, signal)
    return exact, templates


# Every name of every peer (a name without a source); then each peer's own names, which win for that
# source where names collide (TRL logs its bias-corrected KL as `kl`, the key of plain k3).
_EXACT_ALIASES, _TEMPLATE_ALIASES = _tables({s: s.all_aliases for s in SIGNALS})
for _alias, _key in VERL_ALIASES.items():  # names verl 0.9.1 uses besides a signal's own `verl`
    _EXACT_ALIASES.setdefault(_alias, _BY_KEY[_key])
_BY_PEER = {peer: _tables({s: (getattr(s, peer),) for s in SIGNALS if getattr(s, peer)}) for peer in PEERS}
for _alias, _key in VERL_ALIASES.items():
    _BY_PEER["verl"][0].setdefault(_alias, _BY_KEY[_key])


def get(key: str) -> Signal:
    """The signal with this key; `KeyError` naming it if there is none."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no catalog signal with key {key!r}") from None


def by_name(name: str) -> Signal | None:
    """The signal with this OpenTelemetry instrument name, if any."""
    return _BY_NAME.get(name)


def peer_names(peer: str) -> list[tuple[str, Signal]]:
    """(the peer's name, signal) for every signal `peer` ("trl", "verl", "maxent") logs, in catalog order."""
    if peer not in PEERS:
        raise ValueError(f"peer: {peer!r} is not one of {PEERS}")
    return [(getattr(s, peer), s) for s in SIGNALS if getattr(s, peer)]


def split_stat_key(stat_key: str) -> tuple[str, str | None]:
    """`"reward_fn_mean/format"` -> `("reward_fn_mean", "format")`; `"kl"` -> `("kl", None)`.

    Templated signals appear in stats dicts and step histories once per label
    value, as `<key>/<value>`.
    """
    key, sep, value = stat_key.partition("/")
    return key, (value if sep else None)


def resolve(name: str, source: str | None = None) -> tuple[Signal, dict[str, str]] | None:
    """Map a stats key, a TRL name or a verl name to its signal and data-point attributes.

    >>> resolve("clip_ratio/low_mean")[0].key
    'clip_ratio_low_mean'
    >>> resolve("rewards/format/mean")[1]
    {'reward_fn': 'format'}
    >>> resolve("kl")[0].key, resolve("kl", source="trl")[0].key
    ('kl', 'trl_kl')

    `source` ("trl", "verl", "maxent"): the peer whose metrics dict `name` comes from; its own
    names come first. Without it a key comes first, then any peer's name.
    Returns None for names the catalog does not know.
    """
    if source is not None and source not in _BY_PEER:
        raise ValueError(f"source: {source!r} is not one of {PEERS} (or None)")
    found = _resolve(name, source)
    return None if found is None else (found[0], dict(found[1]))


@lru_cache(maxsize=8192)  # the follow readers and log_metrics(source=) key every name of every step
def stat_key(name: str, source: str | None = None) -> str:
    """The stat key `name` resolves to (`reward_fn_mean/fmt`, `trl_kl`), or `name` itself if unknown.

    What `Telemetry.log_metrics(..., source=)`, the TRL integration and the `follow` readers
    record, so that every path turns a peer's name into the same signal.
    """
    found = resolve(name, source)
    if found is None:
        return name
    signal, labels = found
    return f"{signal.key}/{labels[signal.label]}" if signal.label else signal.key


@lru_cache(maxsize=8192)  # an evaluation's record keys every name it logs (a training step's: none)
def evaluation_key(name: str) -> str | None:
    """The name an evaluation's value of `name` is recorded under: its own for the trainer's state (`TRAINER_STATE`:
    the `epoch` transformers logs beside its `eval_` keys) and for an evaluation metric already; none for the step
    index (`step`, verl's `training/global_step`: an evaluation does not move the run's step); for every other name,
    a statistic of training steps or one the catalog does not know (a `grpo.extra.*` gauge, a column of the step's
    row, which training fills), the evaluation's metric of that name, `eval_metric/<name>`
    (`grpo.eval{metric="<name>"}`, as transformers' `eval_<name>`).

    >>> evaluation_key("reward"), evaluation_key("my_score"), evaluation_key("epoch"), evaluation_key("step")
    ('eval_metric/reward', 'eval_metric/my_score', 'epoch', None)

    `Step.record` applies it to every key of an evaluation's record (`Telemetry.log_metrics(..., evaluation=True)`,
    `logged_step(..., evaluation=True)`), so an evaluation never sets a training series and its value goes
    everywhere `eval_<name>`'s goes (gauge, step span, spill), whichever of the two names it was logged under.
    """
    found = _resolve(name, None)
    if found is None:
        try:  # the emitter resolves a name it does not know once more, sanitized ("KL" is grpo.kl)
            found = _resolve(sanitize_key(name), None)
        except ValueError:
            pass
    if found is not None and found[0].key == STEP_KEY:
        return None
    if found is not None and (found[0].key == EVAL_KEY or found[0].key in TRAINER_STATE):
        return name
    return f"{EVAL_KEY}/{name}"


def _match(name: str, exact: Mapping[str, Signal], templates: Templates) -> tuple[Signal, dict[str, str]] | None:
    if name in exact:
        return exact[name], {}
    for pattern, signal in templates:
        match = pattern.match(name)
        if match:
            return signal, {signal.label: match.group(1)}  # type: ignore[dict-item]
    return None


@lru_cache(maxsize=8192)  # log_metrics and follow resolve the same few hundred names every step
def _resolve(name: str, source: str | None) -> tuple[Signal, dict[str, str]] | None:
    if source is not None:
        found = _match(name, *_BY_PEER[source])
        if found is not None:
            return found
    key, value = split_stat_key(name)
    signal = _BY_KEY.get(key)
    if signal is not None and (value is None) == (signal.label is None):
        return signal, ({signal.label: value} if signal.label and value else {})
    return _match(name, _EXACT_ALIASES, _TEMPLATE_ALIASES)
