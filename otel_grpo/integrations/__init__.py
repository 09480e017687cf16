"""Adapters for other trainers; each is imported only when used, so `import otel_grpo` needs none of them.

    from otel_grpo.integrations import instrument
    trainer = trl.GRPOTrainer(...)
    instrument(trainer)          # every signal, samples and phases of the run; finished at train end
    trainer.train()

    trainer = transformers.Trainer(..., callbacks=[OtelGrpoCallback()])   # any Trainer: its log dicts

`otel_grpo.integrations.follow` (`otel-grpo follow`) re-emits a framework's own log files
(verl's file logger and generation dumps, TRL's completions parquet, any `{"step": ...}`
JSONL) through `Telemetry`.
"""

from typing import Any

__all__ = ["OtelGrpoCallback", "instrument"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from .._extras import require

        require("trl", f"otel_grpo.integrations.{name}")
        from . import trl as _trl  # imports transformers: only on first use

        return getattr(_trl, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
