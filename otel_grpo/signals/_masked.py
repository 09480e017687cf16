"""Small masked reductions shared by the stat families (device tensors in, 0-d tensors out)."""

from __future__ import annotations

import threading

import torch
from torch import Tensor

from ._partial import Stats
from ._validate import value_check

_F64 = torch.float64
INF = float("inf")
SAFETY_BOUND = 20.0  # IS ratios are exp(clamp(log ratio, +-20)); exp(20) ~ 4.9e8: no overflow in float32


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
        n_row: [B] tokens per row (mf's dtype); rows: [B] bool, row has a token.
        n: 0-d float64, tokens in the batch.
        scratch: [B, T] buffer of mf's dtype, free for any intermediate.
    """

    __slots__ = ("mf", "n_row", "rows", "n", "scratch", "_bits", "_inf", "_all_rows", "_k", "_den")

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
        self.rows = self.n_row > 0
        self.n = self.n_row.sum(dtype=_F64)
        # all bits set on tokens, 0 on padding
        self._bits = workspace("bits", mask, _INT_OF[dtype]).copy_(self.mf).neg_()
        self._inf = False
        self._all_rows: Tensor | None = None
        self._k: Tensor | None = None
        self._den: Tensor | None = None

    def all_rows(self) -> Tensor:
        """0-d float64: B, or 0 when no row has a token (the seed's "over all rows": its merge
        drops a rank whose batch has no valid token). Computed once, on first use."""
        if self._all_rows is None:  # n is a whole number: clamped to 1, it is 0 or 1
            self._all_rows = torch.clamp(self.n, max=1.0).mul_(len(self.n_row))
        return self._all_rows

    def k(self) -> Tensor:
        """0-d float64: rows with a token. Computed once, on first use."""
        if self._k is None:
            self._k = count(self.rows)
        return self._k

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


def total(x: Tensor) -> Tensor:
    """Sum of [B, T] `x` as 0-d float64: per-row sums in `x`'s dtype, then float64 across rows.

    Rows are never split across ranks, so the per-row sums are the same however the
    batch is split, and the result differs across splits only by float64 rounding.
    """
    return x.sum(-1).sum(dtype=_F64)


def tmax(x: Tensor) -> Tensor:
    """Max of [B, T] `x` (0-d): per-row maxima, then their max. The same value as `x.max()`
    (NaN included), at a third of the cost on CPU, where full reductions do not vectorize."""
    return x.amax(-1).amax()


def tmin(x: Tensor) -> Tensor:
    """Min of [B, T] `x` (0-d), as `tmax`."""
    return x.amin(-1).amin()


def rows_above(x: Tensor, c: float, out: Tensor) -> Tensor:
    """Per-row numbers of elements of [B, T] `x` strictly above `c`, via `out` ([B], x's dtype)."""
    return torch.sub(x, c, out=out).sign_().clamp_(min=0).sum(-1)


def rows_below(x: Tensor, c: float, out: Tensor) -> Tensor:
    """Per-row numbers of elements of [B, T] `x` strictly below `c`, via `out` ([B], x's dtype)."""
    return torch.sub(x, c, out=out).sign_().clamp_(max=0).sum(-1).neg_()


class RowSums:
    """Sums over rows of [B] vectors, all of one call's in a few float64 reductions.

        >>> rs = RowSums(stats)
        >>> rs.mean("mismatch_k3_kl", k3.sum(-1), n)   # queued: [B] per-row sums
        >>> rs.flush()                                 # one stack + sum per dtype, then the add_* calls

    Each stat summed on its own would cost one or two more tiny torch ops, and
    tiny ops (a fixed cost each on CPU: benchmarks/README.md, costs) are what the hot path
    spends most on. Rows may be float32, float64 or bool ([B] each); all are summed in float64, grouped by
    dtype (stacking mixed dtypes costs more than the sums it saves). Rows are never
    split across ranks, so the per-row values are the same however the batch is split.
    """

    __slots__ = ("stats", "groups", "calls")

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.groups: dict[torch.dtype, list[Tensor]] = {}
        self.calls: list[tuple] = []

    def mean(self, key: str, row: Tensor, count: Tensor) -> None:
        """`stats.add_mean(key, sum of row, count)` at `flush`."""
        self.call(lambda total_: self.stats.add_mean(key, total_, count), row)

    def call(self, fn, *rows: Tensor) -> None:
        """`fn(*sums of rows)` at `flush`."""
        at = []
        for row in rows:
            group = self.groups.setdefault(row.dtype, [])
            at.append((row.dtype, len(group)))
            group.append(row)
        self.calls.append((fn, at))

    def block(self, fn, rows: Tensor) -> None:
        """`fn(*sums)` of the rows of a [K, B] tensor at `flush`."""
        self.call(fn, *rows.unbind())

    def flush(self) -> None:
        if not self.calls:
            return
        start, parts, n = {}, [], 0
        for dtype, group in self.groups.items():
            start[dtype] = n
            parts.append(torch.stack(group).sum(-1, dtype=_F64))
            n += len(group)
        sums = (torch.cat(parts) if len(parts) > 1 else parts[0]).unbind()
        for fn, at in self.calls:
            fn(*(sums[start[dtype] + i] for dtype, i in at))
        self.groups, self.calls = {}, []
