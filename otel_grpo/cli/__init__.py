"""`otel-grpo` command line: one module per command group, registered on one typer app."""

from __future__ import annotations

from ._app import app
from . import sidecar as _sidecar, stack as _stack, train as _train  # noqa: F401  (register commands)

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
