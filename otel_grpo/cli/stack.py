"""`otel-grpo stack` commands (placeholder until the stack issue lands)."""

from ._app import app
