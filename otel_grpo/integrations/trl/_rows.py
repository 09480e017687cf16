"""Row-wise concatenation of per-batch tensors whose token dimension differs (each generation batch pads its own),
the memory such held tensors take, and per-row host values (TRL's lists) moved to the device."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def cat_rows(tensors: Sequence[Tensor], fill: float | bool) -> Tensor:
    """[B_i, T_i] (or [B_i]) tensors -> [sum B_i, max T_i], the shorter ones right-padded with `fill`.

    One tensor comes back as is. Callers pad only where a token mask marks the positions
    invalid, so the stats of the concatenation are those of the batches taken together.
    """
    if len(tensors) == 1:
        return tensors[0]
    first = tensors[0]
    if first.dim() == 1 or all(t.shape[1] == first.shape[1] for t in tensors):
        return torch.cat(list(tensors))
    width = max(t.shape[1] for t in tensors)
    out = first.new_full((sum(t.shape[0] for t in tensors), width), fill)
    at = 0
    for t in tensors:
        out[at : at + t.shape[0], : t.shape[1]] = t
        at += t.shape[0]
    return out


def host_rows(values: Sequence[Sequence[float]] | Sequence[float], dtype: torch.dtype, device: torch.device) -> Tensor:
    """Host numbers (TRL's per-row lists) as a tensor on `device`, without waiting for the device.

    `torch.tensor(values, device=cuda)` copies from pageable memory, which waits for every kernel
    already queued: one stall of the training stream per call. From pinned memory the copy is
    asynchronous and in stream order (torch keeps the pinned block until the copy has run).
    """
    rows = torch.tensor(values, dtype=dtype)
    if device.type == "cpu":
        return rows
    if device.type != "cuda":  # other backends' non-blocking copies from the host make no such promise
        return rows.to(device)
    return rows.pin_memory().to(device, non_blocking=True)


def held_bytes(*tensors: Tensor | None) -> int:
    """Bytes of the given tensors' elements (None: absent)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
