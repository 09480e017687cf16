"""A package's public names resolved on first use (PEP 562), so that importing the package, or a light module
of it, does not import the heavy ones (torch, transformers) its other names live in.

    __getattr__ = lazy_names(__name__, {"Stats": "._partial", ...})
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_names(package: str, where: dict[str, str],
               before: Callable[[str], None] | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: each name of `where` is read from its module (relative to the
    package) on first use and kept in the package; `before(name)` runs first (an optional extra's check)."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before(name)
        value = getattr(importlib.import_module(where[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
