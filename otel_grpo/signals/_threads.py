"""A stats pass on the CPU runs its torch ops in one intra-op thread.

    with signals.single_threaded(device):     # around a pass of stat functions on `device`'s tensors
        reduced = signals.reduce_stats(signals.policy_stats(...) | ..., accelerator)

Stats are hundreds of ops on small tensors. On the CPU, torch hands each `exp`, `log`, `sqrt` or
`tanh` of a float tensor to MKL's vector math, and torch turns MKL's dynamic thread count off: MKL
then starts every thread of its OpenMP team for any size, so one `exp` over a few hundred values
waits for the parked threads to wake up: a few times what one thread takes on idle cores, tens of
times on average (milliseconds at the tail) when another process holds the other cores
(benchmarks/README.md, costs). One thread computes the same numbers: elementwise kernels compute
each value alone, and the stats reduce along rows, which torch never splits between threads.

torch's thread count is one setting for the whole process: while the block runs, CPU ops of other
threads of this process run in one thread too. Wrap the stats pass itself, not the training around it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def single_threaded(device: torch.device | str | None) -> Iterator[None]:
    """One intra-op thread for the block's torch ops when `device` is the CPU (None: the CPU); the
    thread count before it comes back afterwards. Other devices run their kernels as before."""
    cpu = device is None or (device if isinstance(device, torch.device) else torch.device(device)).type == "cpu"
    threads = torch.get_num_threads()
    if not cpu or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
