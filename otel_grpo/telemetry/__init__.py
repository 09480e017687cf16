"""The emission layer: OpenTelemetry providers, catalog instruments, step/phase spans, sample records.

    from otel_grpo.telemetry import Telemetry
    tel = Telemetry.from_env(run_id="exp-42", output_dir="runs/exp-42")
    with tel.step(0) as s:
        with s.phase("rollout"):
            ...
        s.record({"kl": 0.1, "clip_ratio/high_mean": 0.02})
        s.samples([{"prompt": "2+2?", "completion": "4", "reward": 1.0}])
    tel.finish()                       # grpo.run.finished = 1, flush, close
"""

from ._settings import TelemetrySettings
from ._step import Step
from ._telemetry import Telemetry

__all__ = ["Step", "Telemetry", "TelemetrySettings"]
