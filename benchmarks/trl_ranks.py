"""The training thread's CPU in `instrument`'s logged-step flush with two real ranks, per sample selection mode.

    python benchmarks/trl_ranks.py [--modes global,per_rank] [--rounds R] [--steps N] [--logging-steps L]

Each round runs, per mode (`TelemetrySettings.sample_reduce`), one job of two ranks (torchrun, gloo on the
CPU, one intra-op thread a rank) training one instrumented tiny GRPOTrainer (benchmarks/trl.py's tiny preset,
4 rows a rank; in-memory exporters, thread sink) and sums each rank's training-thread CPU (`time.thread_time`)
inside the logged-step callback (`on_log`: merge, gather, hand-over; with "global" also the step's finishing,
judging and the two selection collectives, which that mode runs on the training thread). Printed: per mode, the
median over rounds (and range) of the per-step mean after a warm-up of 2 logged steps, each rank's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/trl.py would shadow the `trl` package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
SUPPORT = [str(ROOT / "tests" / "_support"), str(ROOT / "tests" / "integrations")]


def rank_main(out: Path, mode: str, steps: int, logging_steps: int) -> None:
    """One rank (under torchrun): train, and write this rank's flush CPU per step to `out`."""
    import torch
    from tiny_trl import make_grpo_trainer
    from transformers import TrainerCallback
    from trl_run import in_memory_telemetry

    from otel_grpo.cli.train import end_rank_process
    from otel_grpo.integrations import instrument
    from otel_grpo.integrations.trl import _callback

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    spent, counting = [0.0], [False]
    on_log = _callback.InstrumentedCallback.on_log

    def timed_log(self, *args, **kwargs):
        t0 = time.thread_time()
        try:
            return on_log(self, *args, **kwargs)
        finally:
            if counting[0]:
                spent[0] += time.thread_time() - t0
    _callback.InstrumentedCallback.on_log = timed_log
    warm = 2 * logging_steps

    class Mark(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            counting[0] = counting[0] or state.global_step == warm

    trainer = make_grpo_trainer(out / "run", model_dir=out / "model", callbacks=[Mark()], max_steps=steps,
                                logging_steps=logging_steps, per_device_train_batch_size=4, num_generations=4,
                                max_completion_length=8, num_iterations=2, beta=0.04, log_completions=False)
    tel, _, _ = in_memory_telemetry(out / f"telemetry{rank}", sample_reduce=mode)
    instrument(trainer, telemetry=tel)
    trainer.train()
    tel.shutdown()
    (out / f"rank{rank}.json").write_text(json.dumps(1e3 * spent[0] / (steps - warm)))
    trainer.accelerator.end_training()
    end_rank_process()


def one_job(mode: str, steps: int, logging_steps: int) -> list[float]:
    """Per rank, ms of flush CPU per step of one two-rank job."""
    sys.path[:0] = [str(ROOT)]
    from tests._support.process_group import run_two_ranks
    from tests._support.tiny_trl import save_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_tiny_model(tmp / "model")  # once, before the ranks load it
        script = tmp / "rank.py"
        shutil.copy(__file__, script)
        os.environ["PYTHONPATH"] = os.pathsep.join(SUPPORT)
        run_two_ranks(script, "--rank", str(tmp), mode, str(steps), str(logging_steps), timeout=900,
                      env={"HF_HUB_OFFLINE": "1"}, cwd=tmp)
        return [json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)]


def main() -> None:
    if sys.argv[1:2] == ["--rank"]:
        sys.path[:0] = SUPPORT
        out, mode, steps, logging_steps = sys.argv[2:6]
        rank_main(Path(out), mode, int(steps), int(logging_steps))
        return
    p = argparse.ArgumentParser()
    p.add_argument("--modes", default="global,per_rank")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--logging-steps", type=int, default=10)
    a = p.parse_args()
    modes = a.modes.split(",")
    results: dict[str, list[list[float]]] = {m: [] for m in modes}
    for r in range(a.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            results[mode].append(one_job(mode, a.steps, a.logging_steps))
    for mode, runs in results.items():
        cells = []
        for rank in (0, 1):
            xs = [run[rank] for run in runs]
            cells.append(f"rank {rank} {statistics.median(xs):.3f} ({min(xs):.3f} .. {max(xs):.3f})")
        print(f"{mode}: L={a.logging_steps}, flush ms/step, median (range) of {len(runs)} rounds: " + "; ".join(cells))


if __name__ == "__main__":
    main()
