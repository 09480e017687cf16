"""A synthetic training loop for the collector end-to-end test (run as a subprocess).

    python tests/stack/collector_run.py RUN_ID OUTPUT_DIR STEPS KL_FROM STEP_SECONDS

Records every catalog signal each step through the real Telemetry (OTLP to the
collector, configured by the environment): gauges, the TRL alias of the per-function
reward, per-sample histograms, phases, counters, one NaN and one skipped step. KL is
1.5 from step KL_FROM on. Prints `step N` after each step and `finished` at the end.
"""

from __future__ import annotations

import math
import sys
import time

from otel_grpo import catalog
from otel_grpo.catalog import Kind
from otel_grpo.telemetry import Telemetry

AUTOMATIC = {"step", "run_finished", "run_preempted", "steps", "step_kl", "step_streak", "step_beyond", "nonfinite",
             "skipped_steps", "phase_duration"}
LABELLED = {"reward_fn_mean": "rewards/format/mean", "reward_fn_std": "rewards/format/std"}


class Stats(dict):
    """Scalars with per-sample vectors, as `ReducedStats` carries them."""

    samples: dict[str, list[float]]


def _name(s: catalog.Signal) -> str:
    """A templated signal's stats name is `<key>/<label value>`; two go in by their TRL alias."""
    return LABELLED.get(s.key) or (f"{s.key}/x" if s.label else s.key)


def stats(step: int, kl_from: int) -> Stats:
    out = Stats()
    out.samples = {}
    for s in catalog.SIGNALS:
        if s.key in AUTOMATIC:
            continue
        if s.kind is Kind.HISTOGRAM:
            out.samples[_name(s)] = [0.5, 1.0]
        else:
            out[_name(s)] = 0.5
    out["kl"] = 1.5 if step >= kl_from else 0.1
    out["beta"], out["tokens"], out["samples"] = 0.04, 100.0, 8.0
    out["step_time"] = 0.5
    if step == 3:
        out["loss"] = math.nan  # counted by grpo.nonfinite, never exported as a value
    out.samples.update({"sample_reward": [0.0, 1.0], "sample_advantage": [-1.0, 1.0],
                        "sample_completion_length": [12.0, 40.0], "sample_is_ratio": [0.9, 1.1]})
    return out


def main(run_id: str, output_dir: str, steps: int, kl_from: int, step_s: float) -> None:
    tel = Telemetry.from_env(run_id=run_id, output_dir=output_dir)
    for step in range(steps):
        with tel.step(step) as s:
            with s.phase("rollout"):
                time.sleep(step_s)
            s.record(stats(step, kl_from))
            s.samples([{"prompt": f"q{step}", "completion": "a", "reward": 1.0},
                       {"prompt": f"q{step}", "completion": "b", "reward": 0.0}])
            if step == 5:
                s.skip()
        print(f"step {step}", flush=True)
    tel.finish()
    print("finished", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
