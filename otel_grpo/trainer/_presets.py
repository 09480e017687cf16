"""Named starting points for `--preset`: nested dicts of `TrainConfig` fields.

- `tiny`: seconds on CPU; for tests.
- `demo`: CPU, 1 thread, about 1-2 minutes (at least 0.5 s a step, so scrapers see
  the curves); the reward rises from ~0.1 to ~0.75 (learned from scratch: sort 4 digits).
- `gpu`: a bigger model and batch with bf16 autocast, on one CUDA GPU (run on one: benchmarks/README.md,
  trainer; the tests run its model, task and bf16 autocast on the CPU, with a smaller batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def tiny() -> dict[str, Any]:
    return {
        "steps": 6,
        "num_threads": 1,
        "checkpoint_every": 0,
        "model": {"n_layer": 1, "n_head": 2, "d_model": 32},
        "task": {"kind": "sort", "num_digits": 3},
        "grpo": {"prompts_per_step": 8, "group_size": 4, "num_iterations": 2, "num_minibatches": 2},
        "optim": {"lr": 1e-2, "sft_steps": 5, "sft_batch_size": 32},
    }


def demo() -> dict[str, Any]:
    return {
        "steps": 120,
        "num_threads": 1,
        "min_step_seconds": 0.5,
        "model": {"n_layer": 2, "n_head": 4, "d_model": 64},
        "task": {"kind": "sort", "num_digits": 4},
        # The reference trails the policy (EMA, alpha 0.1 a step): the KL measures recent
        # drift (~0.1-0.8 nats) instead of the distance from a random init (~3 nats).
        "grpo": {"prompts_per_step": 32, "group_size": 8, "num_iterations": 4, "num_minibatches": 1,
                 "ref_sync_steps": 1, "ref_mixup_alpha": 0.1},
        "optim": {"lr": 3e-3, "sft_steps": 0},
        # kl-spike keeps the default x100: at x10 the trailing reference absorbs the jump
        # within a step (KL 1.9 for one 0.5 s step), too brief for a scrape-based alert;
        # x100 holds KL above 1 nat for ~9 steps and collapses the reward, as a real blow-up does.
    }


def gpu() -> dict[str, Any]:
    return {
        "steps": 200,
        "device": "cuda",
        "mixed_precision": "bf16",
        "model": {"n_layer": 4, "n_head": 8, "d_model": 256, "max_len": 48},
        "task": {"kind": "sort", "num_digits": 5},
        "grpo": {"prompts_per_step": 128, "group_size": 16, "num_iterations": 2, "num_minibatches": 4,
                 "ref_sync_steps": 1, "ref_mixup_alpha": 0.1},
        "optim": {"lr": 1e-3, "warmup_steps": 5},
        "faults": {"kl_spike_lr_factor": 10.0},
    }


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {"tiny": tiny, "demo": demo, "gpu": gpu}
