"""Build a `TrainConfig` from a preset, a YAML file and `key=value` overrides, in that order.

    cfg = load_config(preset="demo", yaml_path="run.yaml", overrides=["grpo.beta=0.04"])

Unknown keys, wrong types and failed validation raise `ConfigError` with one
readable line naming the field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from ._config import TrainConfig
from ._presets import PRESETS


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one line for the user."""


def to_dict(config: Any) -> dict[str, Any]:
    """Plain dict of a config dataclass (nested sections as dicts), YAML-serializable."""
    return dataclasses.asdict(config)


def _coerce(value: Any, annotation: Any, path: str) -> Any:
    """Check/convert a YAML value against a field's type annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        annotation = next(a for a in args if a is not type(None))
        origin = typing.get_origin(annotation)
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true/false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if isinstance(value, bool):  # YAML 1.1 reads a bare no / yes as a boolean
            value = "yes" if value else "no"
        elif isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        return list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return {str(k): float(v) for k, v in value.items()}
    return value


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Instantiate config dataclass `cls` from a nested dict, rejecting unknown keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config field {prefix + unknown[0]!r} (known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = from_dict(hint, value, prefix=f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, hint, prefix + name)
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "reward_weights":
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> dict[str, Any]:
    """`"grpo.beta=0.04"` -> {"grpo": {"beta": 0.04}} (the value is parsed as YAML)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like key=value (e.g. grpo.beta=0.04)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    out: dict[str, Any] = value
    for part in reversed(key.strip().split(".")):
        out = {part: out}
    return out


def load_config(
    *, preset: str | None = None, yaml_path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TrainConfig:
    """Preset, then YAML file, then each `key=value` override; validated once at the end."""
    data: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}: expected one of {', '.join(PRESETS)}")
        data = PRESETS[preset]()
    if yaml_path is not None:
        try:
            loaded = yaml.safe_load(Path(yaml_path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config {yaml_path}: {exc}".replace("\n", " ")) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {yaml_path}: expected a mapping of TrainConfig fields, got a "
                              f"{type(loaded).__name__}")
        data = _deep_merge(data, loaded)
    for text in overrides:
        data = _deep_merge(data, parse_override(text))
    return from_dict(TrainConfig, data)
