"""Adapters for other trainers; each is optional and imported only when used.

- `otel_grpo.integrations.follow`: `otel-grpo follow`, re-emitting a framework's own
  log files (verl's file logger and generation dumps, TRL's completions parquet, any
  `{"step": ...}` JSONL) through `Telemetry`.
"""

__all__: list[str] = []
