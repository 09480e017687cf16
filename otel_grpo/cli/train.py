"""`otel-grpo train` commands (placeholder until the train issue lands)."""

from ._app import app
