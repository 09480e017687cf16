"""Row-wise concatenation of per-batch tensors whose token dimension differs (each generation batch pads its own),
and the memory such held tensors take."""

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


def held_bytes(*tensors: Tensor | None) -> int:
    """Bytes of the given tensors' elements (None: absent)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
