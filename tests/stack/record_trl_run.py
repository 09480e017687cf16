"""Records a real healthy TRL GRPO run's per-step values for the alert replays (not a test module).

    HF_HUB_OFFLINE=1 PYTHONPATH=$PWD python tests/stack/record_trl_run.py prometheus/tests/runs/trl-healthy-200.jsonl 200

A real `trl.GRPOTrainer` on the tiny Llama of `tests/_support/tiny_trl.py` (CPU, a few
minutes), instrumented with `otel_grpo.integrations.instrument` exporting nowhere but its
local step spill (`steps.jsonl`, the step span's scalars under their catalog keys).
Each line of the output is one step: the keys the rules read, at 6 significant digits,
as `prometheus/tests/runs/demo-healthy-*.jsonl` hold the demo trainer's `metrics.jsonl`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_support"))

from tiny_trl import make_grpo_trainer  # noqa: E402

# What the alert rules read (as for the demo recordings); a key TRL does not log stays out.
KEYS = ("kl", "beta", "reward", "entropy", "grad_norm", "tokens_per_second", "step_time", "mismatch_k3_kl",
        "mismatch_chi2_token", "clip_ratio_region_mean", "completions_clipped_ratio", "frac_reward_zero_std")


def record(out: Path, steps: int, learning_rate: float) -> int:
    from otel_grpo.integrations import instrument

    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_grpo_trainer(Path(tmp) / "train", max_steps=steps, learning_rate=learning_rate, seed=0)
        instrument(trainer, run_id="trl-healthy", output_dir=tmp, metrics_exporters=["none"],
                   traces_exporters=["none"], emit_in="thread")
        trainer.train()
        lines = [json.loads(line) for line in (Path(tmp) / "steps.jsonl").read_text().splitlines() if line.strip()]
    merged: dict[int, dict] = {}  # a step may be spilled twice (train end): its lines merge
    for line in lines:
        merged.setdefault(line["step"], {}).update(line["metrics"])
    rows = [{"step": step, **{k: float(f"{float(m[k]):.6g}") for k in KEYS if k in m}}
            for step, m in sorted(merged.items())]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: record_trl_run.py OUT.jsonl STEPS [LEARNING_RATE (default 1e-3)]")
    lr = float(sys.argv[3]) if len(sys.argv) == 4 else 1e-3
    print(f"{record(Path(sys.argv[1]), int(sys.argv[2]), lr)} steps -> {sys.argv[1]}")
