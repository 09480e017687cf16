"""Optional dependencies: which extra provides what, and one clear error when one is missing.

    require("sidecar")      # before importing fastapi & co: MissingExtra names the pip command

Each extra works on its own: `pip install -e '.[sidecar]'` in a checkout gives `otel-grpo sidecar`,
`up` and `demo`'s stack; `[trainer]` the demo trainer; `[trl]` the TRL integration.
"""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

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
        raise MissingExtra(f"{needs} the [{extra}] extra (missing: {', '.join(absent)}): {install_command(extra)}")


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to this otel-grpo, from where it came: a checkout (the one this code
    runs from, or the one an editable install points at) or a wheel file. otel-grpo is on no package index,
    so `pip install 'otel-grpo[extra]'` finds nothing; it is the answer only where an index did install it."""
    checkout = Path(__file__).resolve().parents[1]
    project = checkout / "pyproject.toml"
    if project.is_file() and 'name = "otel-grpo"' in project.read_text():
        return f"pip install -e '{checkout}[{extra}]'"
    try:
        origin = json.loads(metadata.distribution("otel-grpo").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        origin = {}
    url = urlparse(origin.get("url", ""))
    if url.scheme == "file":
        return f"pip install '{unquote(url.path)}[{extra}]'"
    return f"pip install 'otel-grpo[{extra}]'"
