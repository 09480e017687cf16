"""Host numbers onto the device without waiting for it.

    >>> lengths = signals.to_device(host_lengths, device)   # a list or a CPU tensor

`torch.tensor(values, device=cuda)` or `cpu_tensor.to(cuda)` copies from pageable memory, which
waits for every kernel already queued on the stream: one stall of the training loop per call, where
the stat functions' promise is one wait per step (`reduce_stats`' copy). From pinned memory the copy
is asynchronous and in stream order; torch keeps the pinned block until the copy has run.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def to_device(values: Tensor | Sequence, device: torch.device | str, dtype: torch.dtype | None = None) -> Tensor:
    """`values` (a CPU tensor or nested lists of numbers) as a tensor on `device`; on CUDA a pinned,
    non-blocking copy, on the CPU the host tensor itself (no copy)."""
    try:
        host = torch.as_tensor(values, dtype=dtype)
    except (TypeError, ValueError, RuntimeError) as error:  # a string, ragged lists: torch's own words, one line
        raise ValueError(f"values: expected a CPU tensor or (nested) lists of numbers, got "
                         f"{type(values).__name__} ({str(error).splitlines()[0]})") from None
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError) as error:
        raise ValueError(f"device: {str(error).splitlines()[0]}") from None
    if device.type == "cpu":
        return host
    if device.type != "cuda":  # other backends' non-blocking copies from the host make no such promise
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
