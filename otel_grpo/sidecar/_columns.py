"""Step columns named by the catalog: the store keeps `kl`, every reader sees `grpo.kl`.

    column("kl")                        -> "grpo.kl"
    column("reward_fn_mean/format")     -> "grpo.reward_fn.mean/format"
    column("phase_duration/rollout")    -> "grpo.phase.duration/rollout"
    describe("kl")["prometheus"]        -> "grpo_kl"

The store holds stat keys (what the telemetry records); the steps API, the web page and the
Grafana panels that read the sidecar name a signal by its OTel name, the one the docs use,
with its Prometheus series beside it (`/api/runs/{run_id}/metrics`, the page's legends). A
templated signal is `<name>/<label value>`. A scalar the catalog does not know keeps its own
name, and a request may still select a column by its stat key or Prometheus name.
"""

from __future__ import annotations

from functools import lru_cache

from otel_grpo import catalog

_BY_KEY = {s.key: s for s in catalog.SIGNALS}
# What a `metrics=` selection may name: the catalog name (the column), the Prometheus name, the key.
_BY_ANY = {**{s.key: s for s in catalog.SIGNALS}, **{s.prometheus_name: s for s in catalog.SIGNALS},
           **{s.name: s for s in catalog.SIGNALS}}


def _signal(stat_key: str) -> tuple[catalog.Signal, str | None] | None:
    key, value = catalog.split_stat_key(stat_key)
    signal = _BY_KEY.get(key)
    if signal is None or (value is None) != (signal.label is None):
        return None
    return signal, value


@lru_cache(maxsize=65536)  # every column of every step row goes through it
def column(stat_key: str) -> str:
    """The API's name of a stored stat key: the catalog's OTel name (and `/<label value>`)."""
    found = _signal(stat_key)
    if found is None:
        return stat_key
    signal, value = found
    return signal.name if value is None else f"{signal.name}/{value}"


def stat_key(name: str) -> str:
    """The stored key a selected column names (catalog name, Prometheus name or key; `/<value>` kept)."""
    signal = _BY_ANY.get(name)
    if signal is not None and signal.label is None:
        return signal.key
    base, sep, value = name.partition("/")
    signal = _BY_ANY.get(base)
    if sep and signal is not None and signal.label is not None:
        return f"{signal.key}/{value}"
    return name


def stat_keys(names: list[str] | None) -> list[str] | None:
    """The stored keys a `metrics=` selection names, in its order, once each; None: every column."""
    return None if names is None else list(dict.fromkeys(stat_key(m) for m in names))


def unit_label(unit: str) -> str:
    """A catalog unit as an axis label: `{nat}` -> nat, `s` -> s (UCUM braces are annotations)."""
    return unit[1:-1] if unit.startswith("{") and unit.endswith("}") else unit


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def describe(stat_key: str) -> dict[str, str | None]:
    """One column's names and meaning: `name` (the column), `prometheus` (its series, with the
    label for a templated signal; None for a scalar the catalog does not know), `key`, `unit`,
    `description`."""
    found = _signal(stat_key)
    if found is None:
        return {"name": stat_key, "prometheus": None, "key": stat_key, "unit": None, "description": None}
    signal, value = found
    prometheus = signal.prometheus_name
    if value is not None:
        prometheus += f'{{{signal.label}="{_label_value(value)}"}}'
    return {"name": column(stat_key), "prometheus": prometheus, "key": stat_key, "unit": unit_label(signal.unit),
            "description": signal.description}
