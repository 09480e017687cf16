"""Finalize a step's `Stats` across ranks: one collective, finalize on device, one host copy.

    >>> reduced = reduce_stats(stats, accelerator)   # every rank calls it, same keys
    >>> reduced["kl"], reduced.samples["sample_reward"], reduced.invalid

Every rank packs its parts into one flat float64 tensor: the SUM-combined parts
(sums, sums of squares, counts, pending data checks), the MIN and MAX parts, the
per-sample vectors and the n-gram id payloads (int64, carried bit for bit as
float64). One `all_gather` brings every rank's pack to every rank; each rank
combines them in rank order (so all ranks get bit-identical results), finalizes
on device (means, std, ESS, nanquantile, distinct-n) and copies one packed
result tensor to the host. That is one collective, where the seed's merge runs one
all-reduce per key, and one device-to-host transfer per step.

Ranks must pass the same keys with per-sample vectors of the same length; a
layout fingerprint travels in the pack and a mismatch raises `RuntimeError`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.distributed as dist
from torch import Tensor

from ._partial import FIELDS, Part, Stats
from ._reduced import ReducedStats

_F64 = torch.float64
_ESS_EPS = 1e-8  # the seed's: 1 / mean((w / (mean w + 1e-8))^2)
_BY_PART = (Part.MEAN, Part.STD, Part.ESS, Part.MIN, Part.MAX, Part.SUM)


@dataclass(slots=True)
class _Layout:
    """Where each part sits in the flat pack; identical on every rank for the same keys."""

    keys: dict[Part, list[str]] = field(default_factory=dict)
    sum_slots: list[tuple[str, str]] = field(default_factory=list)
    vectors: list[tuple[str, int]] = field(default_factory=list)
    ids: list[tuple[str, int]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)
    unbiased: set[str] = field(default_factory=set)
    quantiles: dict[str, tuple[str, float]] = field(default_factory=dict)
    fingerprint: float = 0.0

    @staticmethod
    def of(stats: Stats) -> _Layout:
        """The layout of `stats`' structure; cached, as every step has the same structure."""
        signature = (
            tuple(sorted(stats.specs.items())),
            tuple(sorted((k, v.numel()) for k, v in stats.vectors.items())),
            tuple(sorted((k, v.numel()) for k, v in stats.ids.items())),
            tuple(sorted((a, message) for a, (_, message) in stats.checks.items())),
        )
        return _layout_of(signature)

    @classmethod
    def build(cls, signature: tuple) -> _Layout:
        specs_items, vectors, ids, checks = signature
        specs = dict(specs_items)
        lay = cls()
        for part in Part:
            lay.keys[part] = sorted(k for k, s in specs.items() if s.part is part)
        # slots grouped by part, then field: finalizing is one vector op per part
        for part in _BY_PART:
            for name in FIELDS[part]:
                lay.sum_slots += [(k, name) for k in lay.keys[part]]
        lay.vectors, lay.ids = list(vectors), list(ids)
        lay.checks = [a for a, _ in checks]
        lay.messages = dict(checks)
        lay.unbiased = {k for k in lay.keys[Part.STD] if specs[k].unbiased}
        lay.quantiles = {k: (specs[k].source, specs[k].q) for k in lay.keys[Part.QUANTILE]}
        text = repr((lay.keys, lay.sum_slots, lay.vectors, lay.ids, lay.checks))
        lay.fingerprint = float(zlib.crc32(text.encode()))  # < 2**32: exact in float64
        return lay


@lru_cache(maxsize=64)
def _layout_of(signature: tuple) -> _Layout:
    return _Layout.build(signature)


def reduce_stats(stats: Stats, accelerator=None) -> ReducedStats:
    """Finalize `stats` over every rank; the same `ReducedStats` on each.

    Args:
        stats: this rank's partial aggregates (merge micro-batches with `|` first).
        accelerator: an `accelerate.Accelerator`; None uses the default
            `torch.distributed` group when one is initialized, else this process only.

    Keys with no valid element (a mean over zero tokens, the min of nothing) are
    listed in `.invalid` instead of being reported. Raises `ValueError` for a
    failed on-device data check (for example a mask with values other than 0/1).
    """
    if not stats.specs and not stats.vectors and not stats.checks:
        return ReducedStats()
    layout = _Layout.of(stats)
    gathered = _all_gather(_pack(stats, layout), accelerator)  # [W, L]
    result = _finalize(gathered, layout)
    host = result.tolist()  # the step's one device-to-host transfer
    return _unpack(host, layout, world=gathered.shape[0])


def _pack(stats: Stats, lay: _Layout) -> Tensor:
    device = _device(stats)
    pieces = [torch.stack([stats.sums[s] for s in lay.sum_slots])] if lay.sum_slots else []
    pieces += [torch.stack([stats.checks[a][0] for a in lay.checks])] if lay.checks else []
    for store, keys in ((stats.mins, lay.keys[Part.MIN]), (stats.maxs, lay.keys[Part.MAX])):
        if keys:
            pieces.append(torch.stack([store[k] for k in keys]))
    pieces += [stats.vectors[k] for k, _ in lay.vectors]
    # int64 ids travel bit for bit inside the float64 pack (cat and gather copy bytes)
    pieces += [stats.ids[k].contiguous().view(_F64) for k, _ in lay.ids]
    pieces.append(torch.full((1,), lay.fingerprint, dtype=_F64, device=device))
    return torch.cat(pieces)


def _device(stats: Stats) -> torch.device:
    for store in (stats.sums, stats.mins, stats.vectors, stats.ids):
        for t in store.values():
            return t.device
    return torch.device("cpu")


def _all_gather(local: Tensor, accelerator) -> Tensor:
    """[L] -> [W, L], rank order; a plain view when there is one process."""
    if accelerator is not None:
        world = accelerator.num_processes
        return local.unsqueeze(0) if world == 1 else accelerator.gather(local).view(world, -1)
    if dist.is_available() and dist.is_initialized():
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local)
        return torch.stack(parts)
    return local.unsqueeze(0)


class _Reader:
    """Consumes the gathered pack column block by column block."""

    def __init__(self, gathered: Tensor) -> None:
        self.g, self.at = gathered, 0

    def take(self, width: int) -> Tensor:
        block = self.g[:, self.at : self.at + width]
        self.at += width
        return block


def _finalize(gathered: Tensor, lay: _Layout) -> Tensor:
    """[W, L] -> [values (K), valid (K), check counts, layout ok, vectors] on device."""
    read = _Reader(gathered)
    sums = read.take(len(lay.sum_slots)).sum(0)
    checks = read.take(len(lay.checks)).sum(0)
    mins = read.take(len(lay.keys[Part.MIN])).amin(0)
    maxs = read.take(len(lay.keys[Part.MAX])).amax(0)
    vectors = {k: read.take(n).reshape(-1) for k, n in lay.vectors}
    ids = {k: read.take(n).contiguous().view(torch.int64).reshape(-1) for k, n in lay.ids}
    prints = read.take(1)
    values: list[Tensor] = []
    valid: list[Tensor] = []
    _finalize_sums(_Reader(sums.unsqueeze(0)), lay, values, valid, mins, maxs)
    _finalize_gathered(vectors, ids, lay, values, valid)
    layout_ok = (prints == prints[0]).all().to(_F64).reshape(1)
    out = [torch.cat(values), torch.cat(valid).to(_F64)] if values else []
    out += [checks, layout_ok] + [vectors[k] for k, _ in lay.vectors]
    return torch.cat(out)


def _finalize_sums(sums: _Reader, lay: _Layout, values: list, valid: list, mins: Tensor, maxs: Tensor) -> None:
    """Means, stds, ESS, extrema and sums, one vector op per part (layout groups the slots)."""

    def block(part: Part) -> Tensor:
        return sums.take(len(lay.keys[part]))[0]

    total, n = block(Part.MEAN), block(Part.MEAN)
    values.append(total / n.clamp(min=1))
    valid.append(n > 0)
    total, sumsq, n = block(Part.STD), block(Part.STD), block(Part.STD)
    var = (sumsq / n.clamp(min=1) - (total / n.clamp(min=1)) ** 2).clamp(min=0)
    flags = [k in lay.unbiased for k in lay.keys[Part.STD]]
    unbiased = torch.tensor(flags, dtype=torch.bool, device=var.device)
    var = torch.where(unbiased, var * n / (n - 1).clamp(min=1), var)
    values.append(torch.where(n > 1, var.sqrt(), 0.0))  # one element: 0, as the seed
    valid.append(n > 0)
    total, sumsq, n = block(Part.ESS), block(Part.ESS), block(Part.ESS)
    values.append((total / n.clamp(min=1) + _ESS_EPS) ** 2 / (sumsq / n.clamp(min=1)).clamp(min=1e-300))
    valid.append((n > 0) & (sumsq > 0))
    for part, extreme in ((Part.MIN, mins), (Part.MAX, maxs)):
        n = block(part)
        values.append(torch.where(n > 0, extreme, 0.0))
        valid.append(n > 0)
    total = block(Part.SUM)
    values.append(total)
    valid.append(torch.ones_like(total, dtype=torch.bool))


def _finalize_gathered(vectors: dict, ids: dict, lay: _Layout, values: list, valid: list) -> None:
    """Quantiles of the gathered per-sample vectors and distinct-n of the gathered ids."""
    by_source: dict[str, list[str]] = {}
    for key in lay.keys[Part.QUANTILE]:
        by_source.setdefault(lay.quantiles[key][0], []).append(key)
    quantile: dict[str, tuple[Tensor, Tensor]] = {}
    for source, keys in by_source.items():  # one nanquantile call per vector
        vec = vectors[source]
        qs = torch.tensor([lay.quantiles[k][1] for k in keys], dtype=_F64, device=vec.device)
        any_ok = (~torch.isnan(vec)).any()
        found = torch.nanquantile(vec, qs)
        found = torch.where(torch.isnan(found), 0.0, found)  # all-NaN: marked invalid below
        quantile.update({k: (found[i], any_ok) for i, k in enumerate(keys)})
    for key in lay.keys[Part.QUANTILE]:
        values.append(quantile[key][0].reshape(1))
        valid.append(quantile[key][1].reshape(1))
    for key in lay.keys[Part.DISTINCT]:
        sorted_ids = torch.sort(ids[key]).values
        real = sorted_ids != -1
        new = torch.ones_like(real)
        new[1:] = sorted_ids[1:] != sorted_ids[:-1]
        total = real.sum(dtype=_F64)
        values.append(((new & real).sum(dtype=_F64) / total.clamp(min=1)).reshape(1))
        valid.append((total > 0).reshape(1))


def _unpack(host: list[float], lay: _Layout, world: int) -> ReducedStats:
    order = [k for part in _BY_PART + (Part.QUANTILE, Part.DISTINCT) for k in lay.keys[part]]
    k = len(order)
    values, valid = host[:k], host[k : 2 * k]
    at = 2 * k
    bad = host[at : at + len(lay.checks)]
    at += len(lay.checks)
    if host[at] != 1.0:
        raise RuntimeError("ranks passed different stats to reduce_stats (keys or sample counts differ)")
    for argument, count in zip(lay.checks, bad):
        if count > 0:
            raise ValueError(lay.messages[argument])
    at += 1
    samples = {}
    for key, n in lay.vectors:
        samples[key] = [x for x in host[at : at + n * world] if x == x]  # x == x: not NaN
        at += n * world
    result = {key: val for key, val, ok in zip(order, values, valid) if ok}
    invalid = frozenset(key for key, ok in zip(order, valid) if not ok)
    return ReducedStats(result, samples=samples, invalid=invalid)
