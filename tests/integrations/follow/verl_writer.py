"""A stand-in verl job: verl 0.9.1's own `Tracking`/`FileLogger` (from the installed wheel) writes the
metrics file, and each step's generations are dumped in `_write_generations`' format.

    python verl_writer.py VERL_SITE METRICS_FILE ROLLOUT_DIR FIRST LAST [DELAY_S [PAUSE_AFTER GO_FILE]]

With PAUSE_AFTER, the job stops after that step until GO_FILE exists, with its file still
open (verl's FileLogger opens with "wb": a second writer would truncate the file).
With VERL_WRITER_TAG set (an attempt of the job: "second"), completions start with the tag and the
step's score mean is 0.1 higher, so that each attempt's samples and scalars are told apart.

`verl/__init__.py` imports `verl.protocol` (torch, tensordict, ray, ...), so the package
cannot be imported without verl's heavy dependencies; `verl/utils/tracking.py` itself
imports only `orjson` and `packaging`, so it is loaded by file path on its own.
The dumps are written by verl's own `RayPPOTrainer._write_generations` (`verl/trainer/ppo/ray_trainer.py`,
compiled from its source: `load_write_generations`): `<dir>/<step>.jsonl`, one object per sample with
`input`, `output`, `gts`, `score`, `step` and each reward-extra-info entry of full length;
`dump_generations` re-types that format for tests that have no verl wheel at hand.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import os
import sys
import time
from pathlib import Path

SAMPLES = 8


def load_tracking(site: str):
    path = Path(site) / "verl" / "utils" / "tracking.py"
    spec = importlib.util.spec_from_file_location("verl_tracking_0_9_1", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_write_generations(site: str):
    """verl 0.9.1's own `RayPPOTrainer._write_generations` (a static method: no trainer needed), compiled from
    its source alone (`ray_trainer.py` imports ray and torch at the top)."""
    path = Path(site) / "verl" / "trainer" / "ppo" / "ray_trainer.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [func] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_write_generations"]
    func.decorator_list = []
    namespace = {"os": os, "json": json}
    exec(compile(ast.Module([func], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_write_generations"]


def verl_dump(site: str, directory: str, step: int, scores: list | None = None, tag: str = "") -> None:
    """Step `step`'s dump as verl writes it, with `dump_generations`' samples (or these scores); `tag`
    starts each completion (an attempt's own)."""
    write = load_write_generations(site)
    extra = {"acc": [float(i % 2) for i in range(SAMPLES)], "pred": [str(i) for i in range(SAMPLES)]}
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints "Dumped generations to ..."
        write([f"question {step}.{i}" for i in range(SAMPLES)], [f"{tag}answer {step}.{i}" for i in range(SAMPLES)],
              [str(i) for i in range(SAMPLES)], scores or [float(i % 3) / 2 for i in range(SAMPLES)], extra,
              directory, step)


def step_metrics(step: int, tag: str = "") -> dict:
    """The keys one verl GRPO step logs (a subset of each family), with values that identify the step (and
    the attempt: a tagged one's score mean is 0.1 higher)."""
    import numpy as np

    return {
        "training/global_step": step, "training/epoch": 0,
        "critic/score/mean": 0.5 + step / 1000 + (0.1 if tag else 0.0), "critic/score/max": 1.0, "critic/score/min": 0.0,
        "critic/rewards/mean": 0.5, "critic/advantages/mean": 0.0, "critic/advantages/max": 1.5,
        "critic/advantages/min": -1.5, "critic/returns/mean": 0.0,
        "actor/pg_loss": np.float32(-0.01), "actor/kl_loss": 0.001 * step, "actor/entropy": 1.2,
        "actor/pg_clipfrac": 0.02, "actor/ppo_kl": 0.0001, "actor/grad_norm": 0.7, "actor/lr": 1e-6,
        "response_length/mean": 100.0 + step, "response_length/max": 200, "response_length/min": 3,
        "response_length/clip_ratio": 0.1, "prompt_length/mean": 50.0, "prompt_length/max": 60,
        "perf/throughput": 1234.5, "perf/total_num_tokens": 100000, "perf/time_per_step": 3.5,
        "perf/max_memory_allocated_gb": 30.5, "perf/mfu/actor": 0.31,
        "rollout_corr/rollout_is_mean": 1.01, "rollout_corr/kl": 0.002, "rollout_corr/training_ppl": 1.8,
        "timing_s/gen": 1.5, "timing_s/old_log_prob": 0.3, "timing_s/ref": 0.3, "timing_s/adv": 0.01,
        "timing_s/update_actor": 1.2, "timing_s/step": 3.5,
    }


def dump_generations(directory: str, step: int) -> None:
    os.makedirs(directory, exist_ok=True)
    columns = {
        "input": [f"question {step}.{i}" for i in range(SAMPLES)],
        "output": [f"answer {step}.{i}" for i in range(SAMPLES)],
        "gts": [str(i) for i in range(SAMPLES)],
        "score": [float(i % 3) / 2 for i in range(SAMPLES)],
        "step": [step] * SAMPLES,
        "acc": [float(i % 2) for i in range(SAMPLES)],  # reward extra info: numeric
        "pred": [str(i) for i in range(SAMPLES)],  # and text
    }
    with open(os.path.join(directory, f"{step}.jsonl"), "w") as fp:
        for i in range(SAMPLES):
            fp.write(json.dumps({k: v[i] for k, v in columns.items()}, ensure_ascii=False) + "\n")


def main(site: str, metrics: str, rollouts: str, first: int, last: int, delay: float = 0.0,
         pause_after: int | None = None, go_file: str | None = None) -> None:
    tracking = load_tracking(site)
    os.environ["VERL_FILE_LOGGER_PATH"] = metrics
    logger = tracking.Tracking("proj", "exp", default_backend=["file"])
    tag = os.environ.get("VERL_WRITER_TAG", "")
    for step in range(first, last + 1):
        if rollouts != "-":
            verl_dump(site, rollouts, step, tag=f"{tag} " if tag else "")
        logger.log(data=step_metrics(step, tag), step=step)
        if delay:
            time.sleep(delay)
        if step == pause_after:
            while not os.path.exists(go_file):
                time.sleep(0.05)
    logger.finish()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], args[2], int(args[3]), int(args[4]), float(args[5]) if len(args) > 5 else 0.0,
         int(args[6]) if len(args) > 6 else None, args[7] if len(args) > 7 else None)
