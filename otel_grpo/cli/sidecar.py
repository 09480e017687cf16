"""`otel-grpo sidecar` commands (placeholder until the sidecar issue lands)."""

from ._app import app
