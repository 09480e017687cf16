"""Row-wise concatenation of per-batch tensors whose token dimension differs (each generation batch pads its own),
and the memory such held tensors take."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def cat_rows(tensors: Sequence[Tensor], fill: float | bool) -> Tensor:
    """[B_i, T_i] (or [B_i]) tensors -> [sum B_i, max T_i], the shorter ones right-padded with `fill`.

    One tensor comes back as is. Callers pad only where a token mask marks the positions
    invalid, so the stats of the concatenation are those of the batches taken together.
    A narrower batch costs one pad op: a logged step over many batches of their own widths
    (each generation batch pads to its longest completion) concatenates them in a few ops.
    """
    if len(tensors) == 1:
        return tensors[0]
    if tensors[0].dim() == 1:
        return torch.cat(list(tensors))
    width = max(t.shape[1] for t in tensors)
    return torch.cat([t if t.shape[1] == width else F.pad(t, (0, width - t.shape[1]), value=fill) for t in tensors])


def held_bytes(*tensors: Tensor | None) -> int:
    """Bytes of the given tensors' elements (None: absent)."""
    return sum([t.nbytes for t in tensors if t is not None])  # one read per tensor (numel and element_size: two)
