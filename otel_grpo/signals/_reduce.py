"""Finalize a step's `Stats` across ranks: one collective, finalize on device, one host copy.

    >>> reduced = reduce_stats(stats, accelerator)   # every rank calls it, same keys
    >>> reduced["kl"], reduced.samples["sample_reward"], reduced.invalid

Every rank packs its parts into one flat float64 tensor: the SUM-combined parts
(sums, sums of squares, counts, pending data checks), the MIN and MAX parts, the
per-sample vectors and the n-gram id payloads (int64, carried bit for bit as
float64). One `all_gather` brings every rank's pack to every rank; each rank
combines them in rank order (so all ranks get bit-identical results), finalizes
what needs the gathered ids on device (distinct-n) and copies one packed result
tensor to the host, where means, std and ESS are a few float64 operations per key
and quantiles and summaries (`Stats.add_samples`) are read from the gathered vectors,
which the host gets anyway for the histograms, and so are finished per-row tables
(`Stats.add_table(..., finish=)`: the IS and mismatch sets finish their stats from one [B, K]
table per call with numpy there). That is one collective, where the seed's merge runs one
all-reduce per key, and one device-to-host transfer per step.

Ranks must pass the same keys, and finished tables with the same parameters
(`rollout_correction`'s level, mode and thresholds); a layout fingerprint travels in the pack and a
mismatch raises `RuntimeError`. Their numbers of rows may differ (a last batch, packing by tokens):
each rank's sizes travel in the pack too, and every rank pads its vectors and tables to widths all
ranks agree on (the largest so far, per pack shape), so the gather has one size on every rank. A rank
with more rows than those widths makes the step gather twice (every rank sees it in the gathered
sizes and gathers again, wider); so does a layout's first step, which learns the sizes.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ._gathered import GatheredStats, Layout, check_layout
from ._partial import Part, Stats, pad_ids
from ._reduced import ReducedStats
from ._transfer import to_device

_F64 = torch.float64


def reduce_stats(stats: Stats, accelerator=None) -> ReducedStats:
    """Finalize `stats` over every rank; the same `ReducedStats` on each.

    Args:
        stats: this rank's partial aggregates (merge micro-batches with `|` first).
        accelerator: an `accelerate.Accelerator`; None uses the default
            `torch.distributed` group when one is initialized, else this process only.

    Keys with no valid element (a mean over zero tokens, the min of nothing) are
    listed in `.invalid` instead of being reported. Raises `ValueError` for a
    failed on-device data check (for example a mask with values other than 0/1).
    `gather_stats(stats, accelerator).finish()` is the same in two halves.
    """
    return gather_stats(stats, accelerator).finish()


def gather_stats(stats: Stats, accelerator=None) -> GatheredStats:
    """The first half of `reduce_stats`: every rank calls it (one collective); checks what the ranks passed
    (a layout that differs raises `RuntimeError`, a failed data check `ValueError`, as `reduce_stats`)."""
    if not isinstance(stats, Stats):
        raise ValueError(f"stats: expected the signals' Stats (merge micro-batches with |), got {type(stats).__name__}")
    if not stats.specs and not stats.vectors and not stats.checks:
        return GatheredStats(np.empty(0), None, 1)
    layout = Layout.of(stats)
    world = _world(accelerator)
    if world == 1:  # nothing to pad to, and one rank's ids need no trip through the pack
        widths = [n for _, n in layout.vectors]
        flat = _finalize(_pack(stats, layout, widths, with_ids=False).unsqueeze(0), layout, widths, stats.ids)
        return _checked(flat.numpy(force=True), layout, 1, widths)
    key = _widths_key(layout, world)
    widths = _widths(key, len(layout.vectors) + len(layout.ids))
    while True:
        gathered = _all_gather(_pack(stats, layout, widths), accelerator, world)  # [W, L]
        # the step's one device-to-host transfer; finished tables are read as numpy views of it
        flat = _finalize(gathered, layout, widths, None).numpy(force=True)
        gathered = _checked(flat, layout, world, widths[: len(layout.vectors)])
        needed = gathered.sizes()[:, : len(widths)].max(0).astype(np.int64).tolist()
        if all(n <= w for n, w in zip(needed, widths)):
            # a width more than twice what every rank needed now (one large step) shrinks to it, so that padding
            # stays within 2x; every rank sees the same sizes and shrinks alike
            _WIDTHS[key] = [n if 2 * n < w else w for n, w in zip(needed, widths)]
            return gathered
        # a rank had more entries than the widths the ranks agreed on: gather again at the new widths, which
        # every rank takes from the same gathered sizes (so the next collective has one size on every rank)
        widths = _WIDTHS[key] = [max(n, w) for n, w in zip(needed, widths)]


_WIDTHS: dict[tuple[int, ...], list[int]] = {}
"""Per pack shape (`_widths_key`): the entries each rank packs of each vector and id payload (padded below
it): the largest any rank had so far, shrunk to a step's largest where that is less than half. Every rank
makes the same changes, from the same gathered sizes, in the same order of calls, so the widths agree
without a collective of their own: a step gathers once, and twice only when a rank has more rows than the
widths."""


def _widths_key(layout: Layout, world: int) -> tuple[int, ...]:
    """The counts a pack's length depends on besides the widths, and the world. Not the layout's fingerprint:
    ranks whose layouts differ (another rollout_correction threshold on one rank) must still pack alike, so
    that the gather goes through and `check_layout` refuses the step on every rank, rather than the collective
    library aborting a rank on packs of different sizes when one layout's widths were learned and the other's
    not."""
    lay = layout
    return (world, len(lay.sum_slots), len(lay.checks), len(lay.keys[Part.MIN]), len(lay.keys[Part.MAX]),
            lay.n_lengths, len(lay.vectors), len(lay.ids))


def _widths(key: tuple[int, ...], n: int) -> list[int]:
    if len(_WIDTHS) > 256:  # bounded; every rank clears at the same call
        _WIDTHS.clear()
    return _WIDTHS.setdefault(key, [0] * n)


def _checked(flat: np.ndarray, layout: Layout, world: int, widths: list[int]) -> GatheredStats:
    check_layout(flat, layout, world)
    return GatheredStats(flat, layout, world, tuple(widths))


def _pack(stats: Stats, lay: Layout, widths: list[int], with_ids: bool = True) -> Tensor:
    """[sums, check counts, mins, maxs, layout fingerprint, sizes, vectors, ids (with several ranks)], each
    vector and id payload padded or cut to its width (a cut one is gathered again)."""
    device = _device(stats)
    scalars = [stats.sums[s] for s in lay.sum_slots] + [stats.checks[a][0] for a in lay.checks]
    scalars += [stats.mins[k] for k in lay.keys[Part.MIN]] + [stats.maxs[k] for k in lay.keys[Part.MAX]]
    pieces = [torch.stack(scalars)] if scalars else []  # one stack: each is a few us on CPU
    head = lay.device_heads.get(device)
    if head is None:  # one (pinned, non-blocking) copy per layout and device: a step of the same sizes reuses it
        head = lay.device_heads[device] = to_device([lay.fingerprint, *lay.lengths], device, _F64)
    pieces.append(head)
    pieces += [_fit(stats.vectors[k], w, 0.0) for (k, _), w in zip(lay.vectors, widths)]
    # int64 ids travel bit for bit inside the float64 pack (cat and gather copy bytes); -1 pads: no n-gram
    if with_ids:
        pieces += [_fit(stats.ids[k].reshape(-1), w, -1).view(_F64)
                   for (k, _), w in zip(lay.ids, widths[len(lay.vectors):])]
    return torch.cat(pieces)


def _fit(values: Tensor, width: int, pad: float) -> Tensor:
    n = values.numel()
    if n == width:
        return values
    if n > width:
        return values[:width]
    return torch.cat([values, values.new_full((width - n,), pad)])


def _device(stats: Stats) -> torch.device:
    for store in (stats.sums, stats.mins, stats.vectors, stats.ids):
        for t in store.values():
            return t.device
    return torch.device("cpu")


def _world(accelerator) -> int:
    """Processes that reduce together: the accelerator's, else the default group's, else 1."""
    if accelerator is not None:
        return accelerator.num_processes
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _all_gather(local: Tensor, accelerator, world: int) -> Tensor:
    """[L] -> [W, L], rank order; a plain view when there is one process (a group of one has
    nothing to exchange)."""
    if world == 1:
        return local.unsqueeze(0)
    if accelerator is not None:
        return accelerator.gather(local).view(world, -1)
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    return torch.stack(parts)


class _Reader:
    """Consumes the gathered pack column block by column block."""

    def __init__(self, gathered: Tensor) -> None:
        self.g, self.at = gathered, 0

    def take(self, width: int) -> Tensor:
        block = self.g[:, self.at : self.at + width]
        self.at += width
        return block


def _finalize(gathered: Tensor, lay: Layout, widths: list[int], local_ids: dict[str, Tensor] | None) -> Tensor:
    """[W, L] -> [sums, check counts, mins, maxs, layout ok, every rank's sizes, vectors, gathered values,
    their valid flags].

    Only what needs the gathered vectors (quantiles, distinct-n) is finalized on
    device; means, stds, ESS and extrema are a few float operations per key, done
    on the host by `_unpack` (IEEE float64 either way), as some 40 tiny device ops
    cost more than the arithmetic. `widths`: each vector's and id payload's entries per rank in the pack.
    `local_ids`: one rank's id payloads, which its pack left out (None with several ranks: they are in the
    pack, padded with -1, which distinct-n counts nowhere).
    """
    world = gathered.shape[0]
    if world == 1:
        # one rank's parts are the combined parts and its fingerprint stands for "layout ok"
        # (checked only across ranks): the pack as is, and the distinct-n of its ids
        if not lay.ids:
            return gathered[0]
        return torch.cat([gathered[0], _distinct([local_ids[k] for k in lay.keys[Part.DISTINCT]])])
    width = len(lay.sum_slots) + len(lay.checks)
    k_min, k_max = len(lay.keys[Part.MIN]), len(lay.keys[Part.MAX])
    read = _Reader(gathered)
    sums_checks = read.take(width).sum(0)
    head = torch.cat([sums_checks, read.take(k_min).amin(0), read.take(k_max).amax(0)])
    prints = read.take(1)
    out = [head, (prints == prints[0]).all().to(_F64).reshape(1), read.take(lay.n_lengths).reshape(-1)]
    n_vectors = len(lay.vectors)
    out += [read.take(w).reshape(-1) for w in widths[:n_vectors]]
    if lay.ids:
        ids = {k: read.take(w).contiguous().view(torch.int64).reshape(-1)
               for (k, _), w in zip(lay.ids, widths[n_vectors:])}
        out.append(_distinct([ids[k] for k in lay.keys[Part.DISTINCT]]))
    return torch.cat(out)


def _distinct(payloads: list[Tensor]) -> Tensor:
    """Distinct-n of each id payload (-1: none), all in one set of ops: [values..., valid flags...].

    Sorted, a row's distinct values are its first value and each change; -1 (none) sorts first and
    counts only when the row holds nothing else."""
    size = max(p.numel() for p in payloads)
    if size == 0:  # no n-gram at all: every value invalid
        return torch.zeros(2 * len(payloads), dtype=_F64, device=payloads[0].device)
    ordered = torch.sort(torch.stack([pad_ids(p, size) for p in payloads]), dim=-1).values
    real = ordered != -1
    total = real.sum(-1, dtype=_F64)
    distinct = (ordered.diff(dim=-1) != 0).sum(-1, dtype=_F64) + real[:, 0]
    return torch.cat([distinct / total.clamp(min=1), (total > 0).to(_F64)])
