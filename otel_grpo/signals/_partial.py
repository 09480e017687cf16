"""Partial aggregates: what every stat function returns, mergeable across micro-batches.

    >>> s = length_stats(mask, truncated) | reward_stats(rewards, group_size=8)
    >>> s = s | policy_stats(...)           # a second micro-batch merges the same way
    >>> reduce_stats(s, accelerator)        # -> ReducedStats, exact across ranks

A `Stats` holds, per stat key, only parts that combine by SUM, MIN or MAX (sums,
sums of squares, counts, extrema) plus fixed-length per-sample vectors for
histograms, quantiles and summaries (the mean, spread, extremes of one value per
completion: rewards, advantages, lengths). Finalizing (mean = sum / count, std, ESS,
quantiles, summaries, distinct-n) happens once, after the parts of every rank are
combined, so the result equals one process computing on the concatenated batch.

All tensors stay on their device; nothing here reads a value on the host.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import torch
from torch import Tensor

from ..catalog import Reduction, get, split_stat_key
from ._parts import COLUMN_PREFIX, SUMMARIZED_PREFIX, TABLE_PREFIX, Finish, Part

_F64 = torch.float64


@dataclass(frozen=True, slots=True)
class Spec:
    """Finalization recipe of one stat key (identical on every rank)."""

    part: Part
    unbiased: bool = False
    """STD only: divide by n - 1 (torch's default) instead of n."""
    source: str = ""
    """QUANTILE, SUMMARY and GROUP: the per-sample vector key; DISTINCT: the id payload key."""
    q: float = 0.0
    """QUANTILE only: the quantile in [0, 1]."""
    stat: str = ""
    """SUMMARY: one of `SUMMARIES`; GROUP: one of `GROUP_SPREADS`."""
    size: int = 0
    """GROUP only: values per group."""
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # hashed for every key of every step (the layout cache): once here, not per lookup
        # (the generated hash goes through the enum's Python-level __hash__)
        object.__setattr__(self, "_hash", hash((self.part.value, self.unbiased, self.source, self.q, self.stat,
                                                 self.size)))

    def __hash__(self) -> int:
        return self._hash


# The recipes of the plain parts, built once: stat functions add dozens of parts per call
_MEAN, _ESS, _MIN, _MAX, _SUM = (Spec(p) for p in (Part.MEAN, Part.ESS, Part.MIN, Part.MAX, Part.SUM))
_STD = {True: Spec(Part.STD, unbiased=True), False: Spec(Part.STD, unbiased=False)}

SUMMARIES = ("mean", "std", "min", "max", "sum")
"""What `add_samples` can summarize of a per-sample vector (std: unbiased, n - 1)."""
GROUP_SPREADS = ("std", "zero_std")
"""What `add_samples` can tell of the groups of a per-sample vector."""
_SUMMARY_KINDS = {"mean": Reduction.MEAN, "std": Reduction.STD, "min": Reduction.MIN, "max": Reduction.MAX,
                  "sum": Reduction.SUM}


@lru_cache(maxsize=4096)
def _sourced(part: Part, source: str, q: float = 0.0, stat: str = "", size: int = 0) -> Spec:
    """The recipe of a quantile, summary or distinct-n key: the same few dozen every step, made once."""
    return Spec(part, unbiased=part is Part.SUMMARY and stat == "std", source=source, q=q, stat=stat, size=size)




def _scalar(x: Tensor | float, like: Tensor | None = None) -> Tensor:
    """A 0-d float64 tensor; floats become tensors on `like`'s device (`device_scalar`)."""
    if isinstance(x, Tensor):
        if x.dtype == _F64 and x.dim() == 0 and not x.requires_grad:
            return x  # the common case: stat functions hand over float64 sums and counts
        if x.dim() == 0 and not x.requires_grad:  # a float32 max or min: one op, not three
            return x.to(_F64)
        return x.detach().reshape(()).to(_F64)
    return device_scalar(x, None if like is None else like.device)


def device_scalar(x: float, device: torch.device | None) -> Tensor:
    """`x` as a 0-d float64 tensor on `device`, made by a fill: `torch.tensor(x, device=...)` would copy it
    from the host, which on a GPU waits for every kernel already queued (a stall per stat)."""
    return torch.full((), float(x), dtype=_F64, device=device)


@lru_cache(maxsize=1024)  # the same few hundred keys every step
def _check_key(key: str, kinds: tuple[Reduction, ...] | None = None) -> None:
    base, label = split_stat_key(key)
    signal = get(base)  # KeyError names a key the catalog lacks
    if (label is not None) != (signal.label is not None) or label == "":
        raise ValueError(f"stat key {key!r}: templated signals need exactly one '/<value>'")
    if kinds is not None and signal.reduction not in kinds:
        raise ValueError(f"stat key {key!r} is a {signal.reduction.value} signal in the catalog")


def pad_ids(ids: Tensor, size: int) -> Tensor:
    """`ids` flattened to `size` entries, padded with -1 ("no n-gram": counted nowhere by distinct-n)."""
    flat = ids.reshape(-1)
    if flat.numel() == size:
        return flat
    return torch.cat([flat, flat.new_full((size - flat.numel(),), -1)])


class Stats:
    """Per-rank partial aggregates of one step (or several micro-batches merged with `|`).

    Build one with the `add_*` methods (stat functions do), combine with `a | b`
    or `Stats.merge(...)`, finalize with `reduce_stats`. Adding a part to a key that
    already exists combines them (sums add, extrema take the min / max, vectors
    concatenate); adding it with a different recipe raises `ValueError`.
    """

    __slots__ = ("specs", "sums", "mins", "maxs", "vectors", "ids", "checks", "finishes")

    def __init__(self) -> None:
        self.specs: dict[str, Spec] = {}
        self.sums: dict[tuple[str, str], Tensor] = {}  # (key, field) -> 0-d float64
        self.mins: dict[str, Tensor] = {}  # key -> 0-d float64 (+inf when empty)
        self.maxs: dict[str, Tensor] = {}  # key -> 0-d float64 (-inf when empty)
        self.vectors: dict[str, Tensor] = {}  # per-sample key -> [N] float64, NaN = invalid row
        self.ids: dict[str, Tensor] = {}  # id payload key -> [N] int64, -1 = invalid
        self.checks: dict[str, tuple[Tensor, str]] = {}  # argument -> (bad count, message)
        # table key -> (finish, its calls: ((rows, params), ...)), for tables `reduce_stats` finishes
        self.finishes: dict[str, tuple[Finish, tuple[tuple[int, tuple[float, ...]], ...]]] = {}

    # ---- building --------------------------------------------------------------
    def add_mean(self, key: str, total: Tensor | float, count: Tensor | float) -> Stats:
        """`key` = total / count after combining ranks; invalid when count is 0."""
        self._claim_new(key, _MEAN)
        self._slot(key, "sum", total, count)
        self._slot(key, "count", count, total)
        return self

    def _add_means(self, keys: Sequence[str], totals: Sequence[Tensor], counts: Sequence[Tensor]) -> Stats:
        """`add_mean` of each key, for the stat functions: totals and counts must already be 0-d
        float64 tensors without grad (`unbind()` of a float64 vector), which skips the checks
        and conversions that cost more than the dict updates on a micro-batch's few dozen keys."""
        sums = self.sums
        for key, total, count in zip(keys, totals, counts, strict=True):
            self._claim_new(key, _MEAN)
            slot = (key, "sum")
            sums[slot] = sums[slot] + total if slot in sums else total
            slot = (key, "count")
            sums[slot] = sums[slot] + count if slot in sums else count
        return self

    def add_std(self, key: str, total: Tensor, sumsq: Tensor, count: Tensor, *, unbiased: bool) -> Stats:
        """`key` = standard deviation from sum x, sum x^2 and n; 0 when n == 1."""
        return self._add(key, _STD[bool(unbiased)], sum=total, sumsq=sumsq, count=count)

    def add_ess(self, key: str, total: Tensor, sumsq: Tensor, count: Tensor) -> Stats:
        """`key` = (mean w + 1e-8)^2 / mean(w^2): seed 004's effective sample size fraction."""
        return self._add(key, _ESS, sum=total, sumsq=sumsq, count=count)

    def add_min(self, key: str, value: Tensor, count: Tensor | float) -> Stats:
        """`key` = min over ranks of `value`; `count` elements behind it (0: invalid)."""
        self._claim_new(key, _MIN)
        self._slot(key, "count", count, value)
        self._extreme(self.mins, key, value, torch.minimum)
        return self

    def add_max(self, key: str, value: Tensor, count: Tensor | float) -> Stats:
        """`key` = max over ranks of `value`; `count` elements behind it (0: invalid)."""
        self._claim_new(key, _MAX)
        self._slot(key, "count", count, value)
        self._extreme(self.maxs, key, value, torch.maximum)
        return self

    def add_sum(self, key: str, value: Tensor | float) -> Stats:
        """`key` = sum over ranks (counters: tokens, samples)."""
        return self._add(key, _SUM, sum=value)

    def add_samples(self, key: str, values: Tensor, quantiles: dict[str, float] | None = None,
                    summaries: dict[str, str] | None = None, groups: dict[str, str] | None = None,
                    group_size: int = 0) -> Stats:
        """Per-sample vector `values` [N] (NaN: invalid row), gathered for histograms.

        `quantiles` maps stat keys to q in [0, 1] computed from the gathered vector
        (linear interpolation, NaN rows ignored); `summaries` maps stat keys to what they
        are of its valid values: "mean", "std" (unbiased), "min", "max" or "sum" (`SUMMARIES`);
        `groups` maps stat keys to a spread within the groups of `group_size` consecutive rows
        (each rank's rows whole groups): "std" (the mean over groups with a valid value of their
        unbiased std) or "zero_std" (the fraction of those whose std is 0 within 1e-8)
        (`GROUP_SPREADS`). All are finalized on the host from every rank's rows, which reach it
        anyway in the step's one copy: no device op, and the same value one process gets on the
        concatenated batch, bit for bit.
        """
        _check_key(key, (Reduction.SAMPLES,))
        self._vector(key, values, f"samples {key!r}")
        for qkey, q in (quantiles or {}).items():
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"quantile {qkey!r}: q={q} is outside [0, 1]")
            self._claim_new(qkey, _sourced(Part.QUANTILE, key, q))  # no parts: finalized from the vector
        self._summaries(key, summaries)
        for gkey, spread in (groups or {}).items():
            if spread not in GROUP_SPREADS:
                raise ValueError(f"group spread {gkey!r}: {spread!r} is none of {', '.join(GROUP_SPREADS)}")
            if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 \
                    or values.shape[0] % group_size:
                raise ValueError(f"group_size must be a positive int dividing the {values.shape[0]} rows of "
                                 f"{key!r}, got {group_size!r}")
            self._claim_new(gkey, _sourced(Part.GROUP, key, stat=spread, size=group_size))
        return self

    def add_summarized(self, name: str, values: Tensor, summaries: dict[str, str]) -> Stats:
        """A per-sample vector `values` [N] (NaN: invalid row) gathered only for `summaries` of its valid values
        (as `add_samples`' ): no histogram, no column. `name` is local to this `Stats`."""
        key = SUMMARIZED_PREFIX + name
        self._vector(key, values, f"summarized {name!r}")
        self._summaries(key, summaries)
        return self

    def _vector(self, key: str, values: Tensor, what: str) -> None:
        if values.dim() != 1:
            raise ValueError(f"{what} must be 1-D, got shape {tuple(values.shape)}")
        if values.requires_grad:
            values = values.detach()
        if values.dtype != _F64:
            values = values.to(_F64)
        self.vectors[key] = torch.cat([self.vectors[key], values]) if key in self.vectors else values

    def _summaries(self, source: str, summaries: dict[str, str] | None) -> None:
        for skey, stat in (summaries or {}).items():
            kind = _SUMMARY_KINDS.get(stat)
            if kind is None:
                raise ValueError(f"summary {skey!r}: {stat!r} is none of {', '.join(SUMMARIES)}")
            _check_key(skey, (kind,))
            self._claim_new(skey, _sourced(Part.SUMMARY, source, stat=stat))

    def add_column(self, name: str, values: Tensor) -> Stats:
        """A per-sample column `values` [N] (NaN: no value) for the sample table, not a catalog signal:
        gathered with the per-sample vectors (same collective, same host copy) and returned whole, in
        rank order, as `ReducedStats.columns[name]` (no histogram). `name` is the sample row's column."""
        if not name or not isinstance(name, str):
            raise ValueError(f"name: a column needs a non-empty name, got {name!r}")
        if values.dim() != 1:
            raise ValueError(f"column {name!r} must be 1-D, got shape {tuple(values.shape)}")
        if values.requires_grad:
            values = values.detach()
        if values.dtype != _F64:  # each no-op conversion is still a dispatch: a step adds a dozen columns
            values = values.to(_F64)
        key = COLUMN_PREFIX + name
        self.vectors[key] = torch.cat([self.vectors[key], values]) if key in self.vectors else values
        return self

    def add_table(self, name: str, table: Tensor, finish: Finish | None = None,
                  params: Sequence[float] = ()) -> Stats:
        """A [R, K] float64 table of per-row numbers: gathered with the per-sample vectors (same collective,
        same host copy); tables of one `name` concatenate their rows (same K).

        Without `finish` it is no catalog signal: `ReducedStats.tables[name]` gets its host rows, every
        rank's in rank order (one flat row-major list of K floats a row, NaN kept: column j is
        `[j::K]`), for the caller to finish.

        With `finish`, a module-level function, `reduce_stats` finishes it into ordinary stats:
        `finish(rows, params, calls)` gets every rank's rows in rank order as an [N, K] float64 numpy
        array (N: the rows of every rank, which may differ between ranks), this call's `params` (floats:
        thresholds, modes) repeated on each of its rows as an [N, P] array, and each row's call ([N] int:
        one index per call of each rank, so
        that a merge of calls with different parameters keeps each call's own), and returns
        `(values, samples)`: stat key -> (value, valid) (invalid keys go to `.invalid`) and per-sample key
        -> values (NaN: an invalid row, left out as `add_samples`' are). It runs with numpy's floating-point
        warnings off (overflow to inf, NaN kept, as torch). The finish, the number of calls and each call's
        params are part of the layout that ranks must share (not the rows); a name takes one finish and one
        params length.
        """
        if not name or not isinstance(name, str):
            raise ValueError(f"name: a table needs a non-empty name, got {name!r}")
        if table.dim() != 2 or table.dtype != _F64:
            raise ValueError(f"table {name!r} must be 2-D float64, got {table.dtype} {tuple(table.shape)}")
        if finish is not None and not (inspect.isfunction(finish) and "<" not in finish.__qualname__):
            raise ValueError(f"finish: table {name!r} needs a module-level function (the same on every rank), "
                             f"got {finish!r}")
        params = tuple(float(p) for p in params)
        if params and finish is None:
            raise ValueError(f"params: table {name!r} has no finish to take them")
        key = f"{TABLE_PREFIX}{table.shape[1]}:{name}"
        flat = table.detach().reshape(-1)
        if finish is not None or key in self.finishes:
            self._finishing(key, finish, ((table.shape[0], params),))
        self.vectors[key] = torch.cat([self.vectors[key], flat]) if key in self.vectors else flat
        return self

    def _finishing(self, key: str, finish: Finish | None, calls: tuple[tuple[int, tuple[float, ...]], ...]) -> None:
        """Add `calls` to the finished table `key`, refusing a second finish or another params length."""
        held = self.finishes.get(key)
        if held is None and key in self.vectors or held is not None and held[0] is not finish:
            raise ValueError(f"table {key.split(':', 2)[2]!r} combined with two finishes: "
                             f"{held and held[0].__qualname__} and {finish and finish.__qualname__}")
        if held is not None and len(held[1][0][1]) != len(calls[0][1]):
            raise ValueError(f"params: table {key.split(':', 2)[2]!r} takes {len(held[1][0][1])} params a call, "
                             f"got {len(calls[0][1])}")
        self.finishes[key] = (finish, calls if held is None else held[1] + calls)

    def add_distinct(self, key: str, ids: Tensor) -> Stats:
        """`key` = distinct / total over the gathered int64 `ids` [N] of every rank (-1: none)."""
        if ids.dim() != 1 or ids.dtype != torch.int64:
            raise ValueError(f"distinct {key!r} needs 1-D int64 ids, got {ids.dtype} {tuple(ids.shape)}")
        self._claim_new(key, _sourced(Part.DISTINCT, key))
        self.ids[key] = torch.cat([self.ids[key], ids]) if key in self.ids else ids.detach()
        return self

    def add_check(self, argument: str, bad: Tensor, message: str) -> Stats:
        """A data check evaluated on device: `reduce_stats` raises ValueError(message) if bad > 0.

        Used where checking the values eagerly would cost a host sync (on GPUs).
        """
        bad = _scalar(bad)
        if argument in self.checks:
            bad = bad + self.checks[argument][0]
        self.checks[argument] = (bad, message)
        return self

    # ---- combining -------------------------------------------------------------
    def __or__(self, other: Stats) -> Stats:
        if not isinstance(other, Stats):
            return NotImplemented
        return Stats.merge(self, other)

    @staticmethod
    def merge(*parts: Stats) -> Stats:
        """One `Stats` holding the combined parts of all `parts` (none is modified)."""
        out = Stats()
        for p in parts:
            out._absorb(p)
        return out

    def update(self, *parts: Stats) -> Stats:
        """Combine `parts` into this one, in place (`|` copies every part so far); returns self."""
        for p in parts:
            self._absorb(p)
        return self

    def _absorb(self, other: Stats) -> None:
        for key, spec in other.specs.items():
            self._claim(key, spec)
        for slot, value in other.sums.items():
            self.sums[slot] = self.sums[slot] + value if slot in self.sums else value
        for key, value in other.mins.items():
            self._extreme(self.mins, key, value, torch.minimum)
        for key, value in other.maxs.items():
            self._extreme(self.maxs, key, value, torch.maximum)
        for key, (finish, calls) in other.finishes.items():
            self._finishing(key, finish, calls)
        for key, vec in other.vectors.items():
            if key not in other.finishes and key in self.finishes:
                self._finishing(key, None, ())
            self.vectors[key] = torch.cat([self.vectors[key], vec]) if key in self.vectors else vec
        for key, ids in other.ids.items():
            self.ids[key] = torch.cat([self.ids[key], ids]) if key in self.ids else ids
        for arg, (bad, message) in other.checks.items():
            self.add_check(arg, bad, message)

    # ---- internals -------------------------------------------------------------
    def _claim(self, key: str, spec: Spec) -> None:
        held = self.specs.get(key)
        if held is None:
            self.specs[key] = spec
        elif held != spec:
            raise ValueError(f"stat key {key!r} combined with two recipes: {held} and {spec}")

    def _claim_new(self, key: str, spec: Spec) -> None:
        """`_claim` for a part being added: the catalog check too (cached per key)."""
        _check_key(key)
        held = self.specs.setdefault(key, spec)
        if held is not spec and held != spec:  # the shared recipe objects: identity in the common case
            raise ValueError(f"stat key {key!r} combined with two recipes: {held} and {spec}")

    def _slot(self, key: str, name: str, value: Tensor | float, like: Tensor | float) -> None:
        """Add `value` to slot (key, name); a float goes to the device of `like` if that is a tensor."""
        if not (isinstance(value, Tensor) and value.dtype == _F64 and value.dim() == 0 and not value.requires_grad):
            value = _scalar(value, like if isinstance(like, Tensor) else None)
        slot = (key, name)
        sums = self.sums
        sums[slot] = sums[slot] + value if slot in sums else value

    def _add(self, key: str, spec: Spec, **fields: Tensor | float) -> Stats:
        self._claim_new(key, spec)
        like = None  # plain floats go to the device of a tensor field
        for value in fields.values():
            if isinstance(value, Tensor):
                like = value
                break
        sums = self.sums
        for name, value in fields.items():
            value = _scalar(value, like)
            slot = (key, name)
            sums[slot] = sums[slot] + value if slot in sums else value
        return self

    @staticmethod
    def _extreme(store: dict[str, Tensor], key: str, value: Tensor, pick) -> None:
        value = _scalar(value)
        store[key] = pick(store[key], value) if key in store else value

    def keys(self) -> list[str]:
        """Stat keys this holds (finalized keys; per-sample vector keys are in `vectors`)."""
        return sorted(self.specs)

    def __contains__(self, key: object) -> bool:
        return key in self.specs or key in self.vectors

    def __len__(self) -> int:
        return len(self.specs) + len(self.vectors)

    def __repr__(self) -> str:
        return f"Stats(keys={self.keys()}, samples={ {k: v.numel() for k, v in self.vectors.items()} })"
