"""Run under `torchrun --nproc_per_node 2`: each rank reduces its half of one batch.

Writes `<out>/rank<r>.json` with the reduction through an `accelerate.Accelerator`
and through the plain `torch.distributed` group it set up. Not a test module.
"""

import json
import sys

import torch
from accelerate import Accelerator

from otel_grpo.signals import reduce_stats
from signal_batches import everything

B, T, SEED = 8, 13, 7


def as_json(reduced) -> dict:
    return {"values": dict(reduced), "samples": reduced.samples, "invalid": sorted(reduced.invalid)}


def main(out: str) -> None:
    torch.set_num_threads(1)
    # picks up torchrun's environment; on a machine without CUDA only with cpu=True (accelerate 1.15)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    rank, world = accelerator.process_index, accelerator.num_processes
    assert world == 2, world
    half = B // world
    stats = everything(B, T, SEED, rows=slice(rank * half, (rank + 1) * half))
    result = {
        "world": world,
        "accelerate": as_json(reduce_stats(stats, accelerator)),
        "torch_distributed": as_json(reduce_stats(stats)),  # the group accelerate initialized
    }
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(result, f)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1])
