"""otel-grpo: observability for GRPO training on OpenTelemetry.

    import otel_grpo
    tel = otel_grpo.Telemetry.from_env(run_id="exp-42")

The heavy parts load on first use, so `import otel_grpo` needs neither torch
(for the sidecar) nor the OTel SDK (for the signal functions).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "Telemetry": "otel_grpo.telemetry",
    "TelemetrySettings": "otel_grpo.telemetry",
    "reduce_stats": "otel_grpo.signals",
    "ReducedStats": "otel_grpo.signals",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_grpo' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
