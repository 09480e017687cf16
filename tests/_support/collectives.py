"""Count the torch.distributed collectives a block calls (for workers run under torchrun)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch.distributed as dist

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "gather", "gather_object",
               "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
               "barrier", "all_to_all")


@contextmanager
def counting_collectives() -> Iterator[list[str]]:
    """Every torch.distributed collective called inside, by name, in order (accelerate calls them too)."""
    calls: list[str] = []
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def counted(name, fn):
        def call(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)
        return call

    for name, fn in originals.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield calls
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
