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

Ranks must pass the same keys with per-sample vectors and per-row tables of the same length
(`rollout_correction` and `mismatch_stats` make a table: the same B per call on every rank),
and finished tables with the same parameters (`rollout_correction`'s level, mode and
thresholds); a layout fingerprint travels in the pack and a mismatch raises `RuntimeError`.
Lengths that differ make the gather itself fail, in the collective library's words (gloo:
"Received data size doesn't match"): one gather, of one size on every rank, is what keeps
the step at one collective.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ._host import ess_from_sums, finish_vector, group_spread, std_from_sums
from ._partial import COLUMN_PREFIX, FIELDS, SUMMARIZED_PREFIX, TABLE_PREFIX, Finish, Part, Stats, pad_ids
from ._reduced import ReducedStats

_F64 = torch.float64
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
    finishing: dict[str, tuple[dict[str, float], dict[str, str]]] = field(default_factory=dict)
    """Each per-sample vector's quantiles (key -> q) and summaries (key -> stat), finished together
    (`finish_vector`: one sort, one mean for the mean and the std)."""
    grouped: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    """Each per-sample vector's group size and group spreads (key -> spread: `group_spread`)."""
    finishes: dict[str, tuple[Finish, tuple[tuple[int, tuple[float, ...]], ...]]] = field(default_factory=dict)
    """Each finished table's finish and calls (`Stats.add_table`)."""
    _call_rows: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    fingerprint: float = 0.0

    def call_rows(self, key: str, world: int) -> tuple[np.ndarray, np.ndarray]:
        """The finished table `key`'s per-row params [R * world, P] and call indices [R * world], every
        rank's rows in rank order (made once per layout and world)."""
        made = self._call_rows.get((key, world))
        if made is None:
            calls = self.finishes[key][1]
            counts = [rows for rows, _ in calls] * world
            params = np.repeat(np.array([p for _, p in calls] * world, dtype=np.float64).reshape(len(counts), -1),
                               counts, axis=0)
            made = self._call_rows[key, world] = (params, np.repeat(np.arange(len(counts)), counts))
        return made

    @staticmethod
    def of(stats: Stats) -> _Layout:
        """The layout of `stats`' structure; cached, as every step has the same structure."""
        # frozensets, not sorted tuples: hashing a step's ~200 keys costs less than sorting them
        signature = (
            frozenset(stats.specs.items()),
            frozenset((k, v.numel()) for k, v in stats.vectors.items()),
            frozenset((k, v.numel()) for k, v in stats.ids.items()),
            frozenset((a, message) for a, (_, message) in stats.checks.items()),
            frozenset(stats.finishes.items()),
        )
        return _layout_of(signature)

    @classmethod
    def build(cls, signature: tuple) -> _Layout:
        specs_items, vectors, ids, checks = (sorted(part) for part in signature[:4])
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
        for k in lay.keys[Part.QUANTILE]:
            lay.finishing.setdefault(specs[k].source, ({}, {}))[0][k] = specs[k].q
        for k in lay.keys[Part.SUMMARY]:
            lay.finishing.setdefault(specs[k].source, ({}, {}))[1][k] = specs[k].stat
        for k in lay.keys[Part.GROUP]:
            lay.grouped.setdefault(specs[k].source, (specs[k].size, {}))[1][k] = specs[k].stat
        lay.finishes = dict(signature[4])
        finishing = sorted((k, f.__module__, f.__qualname__, calls) for k, (f, calls) in lay.finishes.items())
        text = repr((lay.keys, lay.sum_slots, lay.vectors, lay.ids, lay.checks, finishing))
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
    if not isinstance(stats, Stats):
        raise ValueError(f"stats: expected the signals' Stats (merge micro-batches with |), got {type(stats).__name__}")
    if not stats.specs and not stats.vectors and not stats.checks:
        return ReducedStats()
    layout = _Layout.of(stats)
    world = _world(accelerator)
    # one rank's ids need no trip through the pack: its distinct-n are computed from them directly
    gathered = _all_gather(_pack(stats, layout, with_ids=world > 1), accelerator, world)  # [W, L]
    result = _finalize(gathered, layout, None if world > 1 else stats.ids)
    # the step's one device-to-host transfer; finished tables are read as numpy views of it
    return _unpack(result.numpy(force=True), layout, world=world)


def _pack(stats: Stats, lay: _Layout, with_ids: bool = True) -> Tensor:
    """[sums, check counts, mins, maxs, layout fingerprint, vectors, ids (with several ranks)]."""
    device = _device(stats)
    scalars = [stats.sums[s] for s in lay.sum_slots] + [stats.checks[a][0] for a in lay.checks]
    scalars += [stats.mins[k] for k in lay.keys[Part.MIN]] + [stats.maxs[k] for k in lay.keys[Part.MAX]]
    pieces = [torch.stack(scalars)] if scalars else []  # one stack: each is a few us on CPU
    pieces.append(torch.full((1,), lay.fingerprint, dtype=_F64, device=device))
    pieces += [stats.vectors[k] for k, _ in lay.vectors]
    # int64 ids travel bit for bit inside the float64 pack (cat and gather copy bytes)
    if with_ids:
        pieces += [stats.ids[k].contiguous().view(_F64) for k, _ in lay.ids]
    return torch.cat(pieces)


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


def _finalize(gathered: Tensor, lay: _Layout, local_ids: dict[str, Tensor] | None) -> Tensor:
    """[W, L] -> [sums, check counts, mins, maxs, layout ok, vectors, gathered values, their valid flags].

    Only what needs the gathered vectors (quantiles, distinct-n) is finalized on
    device; means, stds, ESS and extrema are a few float operations per key, done
    on the host by `_unpack` (IEEE float64 either way), as some 40 tiny device ops
    cost more than the arithmetic. `local_ids`: one rank's id payloads, which its
    pack left out (None with several ranks: they are in the pack).
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
    head = torch.cat([head, (prints == prints[0]).all().to(_F64).reshape(1)])
    vectors = {k: read.take(n).reshape(-1) for k, n in lay.vectors}
    ids = {k: read.take(n).contiguous().view(torch.int64).reshape(-1) for k, n in lay.ids}
    out = [head] + [vectors[k] for k, _ in lay.vectors]
    if lay.ids:
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


def _finalize_sums(h: list[float], lay: _Layout, mins: list[float], maxs: list[float]) -> tuple[list, list]:
    """Means, stds, ESS, extrema and sums on the host, in `_BY_PART` order: (keys, (value, valid) pairs).

    The same float64 operations, in the same order, as torch would run on device
    (x * x for squares; max(x, c) for clamp), so the same values, except that
    math.sqrt is correctly rounded where torch's vectorized sqrt may be 1 ulp off.
    """
    keys, out, at = [], [], 0

    def block(part: Part) -> list[float]:
        nonlocal at
        width = len(lay.keys[part])
        at += width
        return h[at - width : at]

    total, n = block(Part.MEAN), block(Part.MEAN)
    out += [(t / max(c, 1.0), c > 0) for t, c in zip(total, n)]
    total, sumsq, n = block(Part.STD), block(Part.STD), block(Part.STD)
    out += [(std_from_sums(t, q, c, key in lay.unbiased), c > 0)
            for key, t, q, c in zip(lay.keys[Part.STD], total, sumsq, n)]
    total, sumsq, n = block(Part.ESS), block(Part.ESS), block(Part.ESS)
    out += [(ess_from_sums(t, q, c), c > 0 and q > 0) for t, q, c in zip(total, sumsq, n)]
    for part, extreme in ((Part.MIN, mins), (Part.MAX, maxs)):
        out += [(x if c > 0 else 0.0, c > 0) for x, c in zip(extreme, block(part))]
    out += [(t, True) for t in block(Part.SUM)]
    for part in _BY_PART:
        keys += lay.keys[part]
    return keys, out


def _unpack(flat: np.ndarray, lay: _Layout, world: int) -> ReducedStats:
    n_sums, n_checks = len(lay.sum_slots), len(lay.checks)
    k_min, k_max = len(lay.keys[Part.MIN]), len(lay.keys[Part.MAX])
    at = n_sums + n_checks + k_min + k_max
    host = flat[: at + 1].tolist()  # Python floats: the scalars' parts and the layout check
    if world > 1 and host[at] != 1.0:  # one rank: its own fingerprint, nothing to compare
        raise RuntimeError("ranks passed different stats to reduce_stats (keys, sample counts or a finished "
                           "table's parameters, such as rollout_correction's thresholds, differ)")
    for argument, count in zip(lay.checks, host[n_sums : n_sums + n_checks]):
        if count > 0:
            raise ValueError(lay.messages[argument])
    mins = host[n_sums + n_checks : n_sums + n_checks + k_min]
    keys, pairs = _finalize_sums(host[:n_sums], lay, mins, host[at - k_max : at])
    at += 1
    samples, columns, summarized, tables = {}, {}, {}, {}
    for key, n in lay.vectors:
        if key in lay.finishes:  # finished here into ordinary stats (`Stats.add_table`)
            # torch's float semantics, quietly: exp overflows to inf, NaN stays NaN
            with np.errstate(all="ignore"):
                _finish_table(key, flat[at : at + n * world], lay, world, keys, pairs, samples)
            at += n * world
            continue
        block = flat[at : at + n * world].tolist()
        if key.startswith(TABLE_PREFIX):  # "table:<width>:<name>": rows of every rank, in rank order, flat
            tables[key[len(TABLE_PREFIX):].split(":", 1)[1]] = block
        elif key.startswith(COLUMN_PREFIX):  # every row, in rank order; NaN: no value
            columns[key[len(COLUMN_PREFIX):]] = [x if x == x else None for x in block]
        elif key.startswith(SUMMARIZED_PREFIX):
            summarized[key] = [x for x in block if x == x]
        else:
            samples[key] = [x for x in block if x == x]  # x == x: not NaN
            if key in lay.grouped:  # rows in rank order, each rank's whole groups: the groups in order
                spreads = group_spread(block, lay.grouped[key][0])
                for gkey, spread in lay.grouped[key][1].items():
                    keys.append(gkey)
                    pairs.append(spreads[spread])
        at += n * world
    # Quantiles and summaries on the host, where every rank's rows already are after the step's one
    # copy: a device nanquantile per vector would add device work and a sync each (sort times:
    # benchmarks/README.md, costs), and moments need no device op either
    for source, (quantiles, summarized_as) in lay.finishing.items():
        for key, value, ok in finish_vector(samples[source] if source in samples else summarized[source],
                                            quantiles, summarized_as):
            keys.append(key)
            pairs.append((value, ok))
    if len(set(keys)) != len(keys):  # a finished table's key also made another way: a programming error
        raise RuntimeError(f"stat keys made twice: {sorted({k for k in keys if keys.count(k) > 1})}")
    k = len(lay.keys[Part.DISTINCT])
    distinct = flat[at : at + 2 * k].tolist()
    pairs += zip(distinct[:k], (ok > 0 for ok in distinct[k:]))
    keys += lay.keys[Part.DISTINCT]
    result = {key: val for key, (val, ok) in zip(keys, pairs) if ok}
    invalid = frozenset(key for key, (_, ok) in zip(keys, pairs) if not ok)
    return ReducedStats(result, samples=samples, invalid=invalid, columns=columns, tables=tables)


def _finish_table(key: str, block: np.ndarray, lay: _Layout, world: int, keys: list, pairs: list,
                  samples: dict[str, list[float]]) -> None:
    """A finished table's stats and per-sample values from its gathered rows, appended to `keys` / `pairs` /
    `samples`."""
    width = int(key[len(TABLE_PREFIX):].split(":", 1)[0])
    params, calls = lay.call_rows(key, world)
    values, per_sample = lay.finishes[key][0](block.reshape(-1, width), params, calls)
    for name, (value, ok) in values.items():
        keys.append(name)
        pairs.append((float(value), bool(ok)))
    for name, values_ in per_sample.items():
        if name in samples:
            raise RuntimeError(f"per-sample key {name!r} made twice")
        samples[name] = [x for x in values_ if x == x]  # NaN: an invalid row, left out as from add_samples
