"""Small masked reductions shared by the stat families (device tensors in, 0-d tensors out)."""

from __future__ import annotations

import threading

import torch
from torch import Tensor

from ._host import INF
from ._partial import Stats
from ._validate import value_check

_F64 = torch.float64


def count(valid: Tensor) -> Tensor:
    """Number of True entries as a 0-d float64 tensor."""
    return valid.sum(dtype=_F64)


def as_f64(x: Tensor) -> Tensor:
    """`x` detached, in float64; a dtype test is cheaper than the dispatch of a no-op conversion."""
    x = x.detach() if x.requires_grad else x
    return x if x.dtype == _F64 else x.to(_F64)


def masked_max(x: Tensor, pad: Tensor) -> Tensor:
    """Max of `x` where `pad` is False (-inf if none): [B, T] -> 0-d."""
    return x.masked_fill(pad, -INF).max()


# ---- a per-thread workspace for [B, T] intermediates ------------------------------
# On CPU a fresh multi-megabyte tensor costs a page fault per 4 KiB page whenever other
# code has churned the heap since the last call (glibc hands freed memory back to the
# OS): in a training step, the model's own allocations do. Intermediates that never
# leave a call therefore live in buffers kept across calls. GPUs have caching
# allocators, and huge buffers are not worth pinning: those get a plain torch.empty.

_WORKSPACE = threading.local()
_WORKSPACE_MAX_BYTES = 64 << 20  # per buffer


def workspace(name: str, like: Tensor, dtype: torch.dtype) -> Tensor:
    """An uninitialized buffer shaped like `like`, reused by the next call asking for `name`.

    The caller must not let it escape the call (return it, or keep it in a result).
    """
    n = like.numel()
    if like.device.type != "cpu" or n * dtype.itemsize > _WORKSPACE_MAX_BYTES:
        return torch.empty(like.shape, dtype=dtype, device=like.device)
    store = getattr(_WORKSPACE, "buffers", None)
    if store is None:
        store = _WORKSPACE.buffers = {}
    last = store.get((name, dtype, "view"))
    if last is not None and last.shape == like.shape:  # as the last call: no slice / view ops
        return last
    # normal tensors even when first asked for under torch.inference_mode: an inference tensor
    # could not be written in place by a later call outside it
    with torch.inference_mode(False):
        buf = store.get((name, dtype))
        if buf is None or buf.numel() < n:
            buf = store[name, dtype] = torch.empty(n, dtype=dtype)
        view = store[name, dtype, "view"] = buf[:n].view(like.shape)
    return view


# ---- float-mask primitives for [B, T] token tensors -------------------------------
# On CPU, selecting with a bool mask (torch.where, masked_fill) or counting a bool
# tensor costs several times a float multiply; the IS and mismatch paths (the hot
# ones, over every rollout token) therefore mask with arithmetic and bit operations.

_INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64}
_INF_BITS = {torch.int32: 0x7F800000, torch.int64: 0x7FF0000000000000}


class TokenMask:
    """A [B, T] 0/1 float mask, validated, and what masking by arithmetic needs from it.

    Built once per call; also owns one [B, T] scratch buffer, because on CPU a fresh
    multi-megabyte tensor costs page faults that exceed the arithmetic on it. The
    scratch, integer and converted-mask buffers are workspace buffers: none may leave
    the call that built this.

    Attributes:
        mf: [B, T] the mask as 0.0 / 1.0 (float32 or float64).
        n_row: [B] tokens per row (mf's dtype).
        n: 0-d float64, tokens in the batch.
        scratch: [B, T] buffer of mf's dtype, free for any intermediate.
    """

    __slots__ = ("mf", "n_row", "n", "scratch", "_bits", "_inf", "_den")

    def __init__(self, mask: Tensor, name: str, stats: Stats, dtype: torch.dtype) -> None:
        self.scratch = workspace("scratch", mask, dtype)
        if mask.dtype != torch.bool:
            # |t * (1 - t)| sums to 0 exactly when every t is 0 or 1 (NaN and inf included)
            t = mask if mask.dtype == dtype else workspace("mask", mask, dtype).copy_(mask)
            bad = torch.addcmul(t, t, t, value=-1, out=self.scratch).abs_().sum() != 0  # |t - t*t|
            value_check(mask, name, bad, stats)
            self.mf = t
        else:
            self.mf = workspace("mask", mask, dtype).copy_(mask)
        self.n_row = self.mf.sum(-1)
        self.n = self.n_row.sum(dtype=_F64)
        # all bits set on tokens, 0 on padding
        self._bits = workspace("bits", mask, _INT_OF[dtype]).copy_(self.mf).neg_()
        self._inf = False
        self._den: Tensor | None = None

    def den(self) -> Tensor:
        """[B] n_row + 1e-8: the seed's masked_mean denominators. Computed once, on first use."""
        if self._den is None:
            self._den = self.n_row + 1e-8
        return self._den

    def zero_(self, x: Tensor) -> Tensor:
        """Set the padding of `x` (contiguous, mf's dtype) to exactly +0.0 in place; returns `x`.

        A bitwise AND of the float's bits, where `x * mask` would turn NaN * 0 into NaN.
        """
        if self._inf:
            raise RuntimeError("TokenMask.zero_() after inf_()")  # a programming error, not bad input
        x.view(self._bits.dtype).bitwise_and_(self._bits)
        return x

    def zeroed(self, x: Tensor, out: Tensor | None = None) -> Tensor:
        """A copy of `x` (mf's dtype) with padding +0.0 (into `out` if given): copy and AND in one pass."""
        if self._inf:
            raise RuntimeError("TokenMask.zeroed() after inf_()")
        if x.dtype != self.mf.dtype:
            x = x.to(self.mf.dtype)
        out = torch.empty_like(self.mf) if out is None else out
        torch.bitwise_and(x.view(self._bits.dtype), self._bits, out=out.view(self._bits.dtype))
        return out

    def inf_(self, x: Tensor) -> Tensor:
        """Set the padding of `x` to +inf in place, where it holds +0.0 or 1.0; returns `x`.

        Both bit patterns are contained in +inf's, so a bitwise OR yields +inf.
        """
        if not self._inf:  # the same integer buffer: all-ones on tokens -> inf bits on padding
            self._bits.bitwise_not_().bitwise_and_(_INF_BITS[self._bits.dtype])
            self._inf = True
        x.view(self._bits.dtype).bitwise_or_(self._bits)
        return x


def rows_above(x: Tensor, c: float, out: Tensor) -> Tensor:
    """Per-row numbers of elements of [B, T] `x` strictly above `c`, via `out` ([B], x's dtype)."""
    return torch.sub(x, c, out=out).sign_().clamp_(min=0).sum(-1)


def rows_below(x: Tensor, c: float, out: Tensor) -> Tensor:
    """Per-row numbers of elements of [B, T] `x` strictly below `c`, via `out` ([B], x's dtype)."""
    return torch.sub(x, c, out=out).sign_().clamp_(max=0).sum(-1).neg_()
