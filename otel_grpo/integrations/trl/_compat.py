"""Which TRL this adapter supports, and whether a trainer still has what `_capture` reads."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from typing import Any

from ._capture import ATTRIBUTES, CONFIG_FIELDS, KEYS, RETURNS, WRAPPED

SUPPORTED_TRL = ">=1.16,<1.17"
"""The TRL versions the tests run against; outside them `instrument` falls back to the log-dict path."""


def unsupported(trainer: Any, version: str | None = None) -> str | None:
    """Why `trainer` cannot be instrumented from its tensors (one line), or None when it can.

    Checks what `_capture` reads: the TRL version, the methods it wraps (and the parameters it
    passes them), the trainer attributes and GRPOConfig fields, and the TRL dict keys, which
    must still appear in the source of the methods that build and read those dicts, and the values read
    from a returned tuple must still be returned where `_capture` reads them.
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        version = version or importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return "trl is not installed"
    try:
        if Version(version) not in SpecifierSet(SUPPORTED_TRL):
            return f"trl {version} is outside the supported range {SUPPORTED_TRL}"
    except InvalidVersion:
        return f"trl's version {version!r} cannot be parsed"
    missing = [m for m in WRAPPED if not callable(getattr(trainer, m, None))]
    missing += [a for a in ATTRIBUTES if not hasattr(trainer, a)]
    missing += [f"args.{f}" for f in CONFIG_FIELDS if not hasattr(getattr(trainer, "args", None), f)]
    if missing:
        return f"{type(trainer).__name__} lacks {', '.join(missing)}"
    for method, params in WRAPPED.items():
        changed = _changed_parameters(getattr(trainer, method), params)
        if changed:
            return f"{type(trainer).__name__}.{method} no longer takes {', '.join(changed)}"
    for method, keys in KEYS.items():
        gone = _keys_not_in_source(method, keys)
        if gone:
            return f"trl's GRPOTrainer.{method} no longer uses the keys {', '.join(gone)}"
    for method, (position, name) in RETURNS.items():
        if not _returns_at(method, position, name):
            return f"trl's GRPOTrainer.{method} no longer returns {name} at position {position}"
    return None


def _changed_parameters(method: Any, params: tuple[str, ...]) -> list[str]:
    """`params` that `method` does not take (a `**kwargs` takes any name)."""
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return []  # a builtin or C method: nothing to compare
    taken = signature.parameters
    if any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        return []
    return [p for p in params if p not in taken]


def _keys_not_in_source(method: str, keys: tuple[str, ...]) -> list[str]:
    """`keys` written nowhere in the installed TRL's `GRPOTrainer.<method>` (as string literals)."""
    from trl import GRPOTrainer

    try:
        source = inspect.getsource(getattr(GRPOTrainer, method))
    except (AttributeError, OSError, TypeError):
        return []  # no source shipped (or no such method: reported above): nothing to compare
    return [k for k in keys if f'"{k}"' not in source and f"'{k}'" not in source]


def _returns_at(method: str, position: int, name: str) -> bool:
    """Whether every `return` of a tuple in the installed TRL's `GRPOTrainer.<method>` has `name` at `position`
    (a tuple's order is not checked by any name, so a reordered return would be read as the wrong value)."""
    from trl import GRPOTrainer

    try:
        source = inspect.getsource(getattr(GRPOTrainer, method))
    except (AttributeError, OSError, TypeError):
        return True  # no source shipped (or no such method: reported above): nothing to compare
    returned = [[part.strip() for part in m.split(",")] for m in re.findall(r"^\s*return ([^\n(]+,[^\n]+)$", source,
                                                                           re.MULTILINE)]
    return bool(returned) and all(len(parts) > position and parts[position] == name for parts in returned)
