"""Optional dependencies: which extra provides what, and one clear error when one is missing.

    require("sidecar")      # before importing fastapi & co: MissingExtra names the pip command

Each extra works on its own: `pip install 'otel-grpo[sidecar]'` gives `otel-grpo sidecar`,
`up` and `demo`'s stack; `[trainer]` the demo trainer; `[trl]` the TRL integration.
"""

from __future__ import annotations

import importlib.util

# extra -> the modules it installs that our code imports (checked without importing them)
EXTRAS: dict[str, tuple[str, ...]] = {
    "sidecar": ("fastapi", "uvicorn", "orjson", "numpy", "psycopg", "httpx"),
    "trainer": ("torch", "accelerate"),
    "trl": ("torch", "transformers", "trl", "datasets"),
    "follow": ("pyarrow",),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is the one line to show."""


def missing(extra: str) -> list[str]:
    """The modules of `extra` that are not importable here."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, what: str | None = None) -> None:
    """Raise `MissingExtra` naming `extra` and its pip command if any of its modules is missing."""
    absent = missing(extra)
    if absent:
        needs = f"{what} needs" if what else "needs"  # without `what`: after a command's own prefix
        raise MissingExtra(f"{needs} the [{extra}] extra (missing: {', '.join(absent)}): "
                           f"pip install 'otel-grpo[{extra}]'")
