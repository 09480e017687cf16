"""Run under `torchrun --nproc_per_node 2`: each rank reduces its half of one batch.

Writes `<out>/rank<r>.json` with the reduction through an `accelerate.Accelerator`
and through the plain `torch.distributed` group it set up, and the collectives each
made. Not a test module.
"""

import json
import sys

import torch
from accelerate import Accelerator

from otel_grpo.signals import _reduce, reduce_stats, rollout_correction
from otel_grpo.signals._gathered import Layout
from tests._support.collectives import counting_collectives
from signal_batches import everything

B, T, SEED = 8, 13, 7


def reduced_json(stats, accelerator=None) -> dict:
    with counting_collectives() as calls:
        reduced = reduce_stats(stats, accelerator)
    return {"values": dict(reduced), "samples": reduced.samples, "columns": reduced.columns,
            "rows": reduced.column_rows(int(torch.distributed.get_rank()), 2), "invalid": sorted(reduced.invalid),
            "collectives": calls}


def thresholds_differ(rank: int) -> str:
    """What reduce_stats says when the ranks' rollout_correction calls had different thresholds: at a step after
    one where they agreed (3 rows against 5), whose sizes the ranks keep for the next gather."""
    g = torch.Generator().manual_seed(rank)
    rows = 3 + 2 * rank
    train, rollout = torch.randn(rows, 6, generator=g), torch.randn(rows, 6, generator=g)
    reduce_stats(rollout_correction(train, rollout, torch.ones(rows, 6), threshold=(0.5, 2.0)).stats)
    _, _, stats = rollout_correction(train, rollout, torch.ones(rows, 6), threshold=(0.5, 2.0 + rank))
    try:
        reduce_stats(stats)
    except RuntimeError as exc:
        return str(exc)
    return "no error"


UNEVEN = (slice(0, 2), slice(2, B))
"""Each rank's rows of the batch where ranks pass different numbers of rows (whole groups of 2 on each)."""


def is_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch for `rollout_correction` alone: (train, rollout log-probs, mask), 8 x 6."""
    g = torch.Generator().manual_seed(3)
    mask = (torch.arange(6) < torch.randint(1, 7, (8, 1), generator=g)).float()
    return -torch.rand(8, 6, generator=g), -torch.rand(8, 6, generator=g), mask


def uneven(rank: int) -> dict:
    """Ranks with different numbers of rows: every family (twice: the second at widths already agreed), and
    `rollout_correction` alone, 3 rows against 5."""
    stats = everything(B, T, SEED, rows=UNEVEN[rank])
    rows = slice(0, 3) if rank == 0 else slice(3, 8)
    _, _, alone = rollout_correction(*(t[rows] for t in is_batch()), level="sequence", mode="truncate")
    small = everything(B, T, SEED, rows=slice(2 * rank, 2 * rank + 2))  # then 2 rows each: the widths shrink
    return {"first": reduced_json(stats), "again": reduced_json(stats), "rollout_correction": reduced_json(alone),
            "widths": max(max(w) for w in _reduce._WIDTHS.values()), "small": reduced_json(small),
            "small_widths": max(_reduce._WIDTHS[_reduce._widths_key(Layout.of(small), 2)])}


def main(out: str) -> None:
    torch.set_num_threads(1)
    # picks up torchrun's environment; on a machine without CUDA only with cpu=True (accelerate 1.15)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    rank, world = accelerator.process_index, accelerator.num_processes
    assert world == 2, world
    half = B // world
    stats = everything(B, T, SEED, rows=slice(rank * half, (rank + 1) * half))
    with counting_collectives() as first:  # a layout's first reduction agrees on its sizes
        reduce_stats(stats, accelerator)
    result = {
        "world": world,
        "first_collectives": first,
        "accelerate": reduced_json(stats, accelerator),
        "torch_distributed": reduced_json(stats),  # the group accelerate initialized
        "thresholds_differ": thresholds_differ(rank),
        "uneven": uneven(rank),
    }
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(result, f)
    accelerator.wait_for_everyone()
    # a gloo group left to the interpreter's teardown can abort a rank at exit (SIGABRT, "terminate called
    # without an active exception"): leave it first. No DDP model here, so leaving frees the group's threads.
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
