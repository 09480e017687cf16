"""The host half of `reduce_stats`: a step's gathered pack finished into `ReducedStats`, with numpy and plain
floats only. No torch here, so that the finishing can run in the telemetry process (`GatheredStats` is
picklable: `Step.defer`), which never imports torch.

    gathered = gather_stats(stats, accelerator)   # `_reduce`: the collective, the device work, the one copy
    reduced = gathered.finish()                   # here: means, stds, ESS, extrema, quantiles, finished tables
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ._host import ess_from_sums, finish_vector, group_spread, std_from_sums
from ._parts import COLUMN_PREFIX, FIELDS, SUMMARIZED_PREFIX, TABLE_PREFIX, Finish, Part
from ._reduced import ReducedStats

if TYPE_CHECKING:
    from ._partial import Stats

_BY_PART = (Part.MEAN, Part.STD, Part.ESS, Part.MIN, Part.MAX, Part.SUM)


@dataclass(slots=True)
class Layout:
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
    _call_rows: dict[tuple[str, tuple], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    device_heads: dict = field(default_factory=dict)
    """`gather_stats`' cache: per device, [fingerprint, *lengths] as a tensor there (never pickled)."""
    fingerprint: float = 0.0
    head: int = 0
    """Where the ranks' sizes start: after the sums, check counts, mins, maxs and the layout check."""
    lengths: list[float] = field(default_factory=list)
    """This rank's sizes, which may differ between ranks (`gather_stats` pads every rank's to the largest):
    each vector's and id payload's entries, then each finished table's rows per call (`call_slots`)."""
    call_slots: dict[str, slice] = field(default_factory=dict)
    """Where each finished table's rows per call sit in `lengths`."""

    def __getstate__(self) -> tuple:  # pickled with a `GatheredStats`
        return tuple(getattr(self, f.name) for f in _PICKLED)

    def __setstate__(self, state: tuple) -> None:
        for f, value in zip(_PICKLED, state):
            setattr(self, f.name, value)
        self._call_rows, self.device_heads = {}, {}

    @property
    def n_lengths(self) -> int:
        """How many sizes each rank sends."""
        return len(self.lengths)

    def call_rows(self, key: str, rows: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, np.ndarray]:
        """The finished table `key`'s per-row params [R, P] and call indices [R] over every rank's rows in rank
        order, `rows[r][c]` being rank r's rows of call c (made once per layout and row counts)."""
        made = self._call_rows.get((key, rows))
        if made is None:
            params = [p for _, p in self.finishes[key][1]] * len(rows)
            counts = [n for rank in rows for n in rank]
            params = np.repeat(np.array(params, dtype=np.float64).reshape(len(counts), -1), counts, axis=0)
            made = self._call_rows[key, rows] = (params, np.repeat(np.arange(len(counts)), counts))
        return made

    @staticmethod
    def of(stats: Stats) -> Layout:
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
    def build(cls, signature: tuple) -> Layout:
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
        lay.head = len(lay.sum_slots) + len(lay.checks) + len(lay.keys[Part.MIN]) + len(lay.keys[Part.MAX]) + 1
        lay.messages = dict(checks)
        lay.unbiased = {k for k in lay.keys[Part.STD] if specs[k].unbiased}
        for k in lay.keys[Part.QUANTILE]:
            lay.finishing.setdefault(specs[k].source, ({}, {}))[0][k] = specs[k].q
        for k in lay.keys[Part.SUMMARY]:
            lay.finishing.setdefault(specs[k].source, ({}, {}))[1][k] = specs[k].stat
        for k in lay.keys[Part.GROUP]:
            lay.grouped.setdefault(specs[k].source, (specs[k].size, {}))[1][k] = specs[k].stat
        lay.finishes = dict(signature[4])
        at = len(lay.vectors) + len(lay.ids)
        for key in sorted(lay.finishes):
            calls = len(lay.finishes[key][1])
            lay.call_slots[key] = slice(at, at + calls)
            at += calls
        lay.lengths = ([float(n) for _, n in lay.vectors] + [float(n) for _, n in lay.ids]
                       + [float(rows) for key in lay.call_slots for rows, _ in lay.finishes[key][1]])
        # the structure the ranks must share; sizes (rows, entries) may differ and travel in the pack
        finishing = sorted((k, f.__module__, f.__qualname__, tuple(p for _, p in calls))
                           for k, (f, calls) in lay.finishes.items())
        text = repr((lay.keys, lay.sum_slots, [k for k, _ in lay.vectors], [k for k, _ in lay.ids], lay.checks,
                     finishing))
        lay.fingerprint = float(zlib.crc32(text.encode()))  # < 2**32: exact in float64
        return lay


_PICKLED = tuple(f for f in fields(Layout) if f.name not in ("_call_rows", "device_heads"))
"""A layout's fields but its caches: made again where it is read."""


@lru_cache(maxsize=64)
def _layout_of(signature: tuple) -> Layout:
    return Layout.build(signature)


@dataclass(slots=True)
class GatheredStats:
    """A step's stats of every rank on the host, not finished yet: the first half of `reduce_stats` (the
    collective, the device work and the one copy, on every rank), whose `finish()` is the second (host
    arithmetic only). Picklable, so that the finishing can run elsewhere (`Step.defer`):

        gathered = gather_stats(stats, accelerator)   # training thread, every rank
        reduced = gathered.finish()                   # anywhere, later: the ReducedStats reduce_stats returns
    """

    flat: np.ndarray
    """The packed result: every part combined over ranks, every rank's sizes (`Layout.lengths`), then every
    rank's vectors and tables, each rank's padded to `widths`."""
    layout: Layout | None
    """Where each part sits in `flat`; None: nothing was passed."""
    world: int
    widths: tuple[int, ...] = ()
    """Each vector's entries per rank in `flat`: the largest rank's (or more), the others padded."""

    def finish(self) -> ReducedStats:
        """The finished stats, as `reduce_stats` returns them."""
        if self.layout is None:
            return ReducedStats()
        return _unpack(self)

    def sizes(self) -> np.ndarray:
        """[world, len(Layout.lengths)]: every rank's sizes, in rank order."""
        lay = self.layout
        return self.flat[lay.head : lay.head + lay.n_lengths * self.world].reshape(self.world, lay.n_lengths)

    def vectors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Each vector's entries of every rank, in rank order, without the padding (views where no rank was
        padded), in `Layout.vectors`' order."""
        at = self.layout.head + self.layout.n_lengths * self.world
        for i, (key, _) in enumerate(self.layout.vectors):
            yield key, self._block(i, at)
            at += self.widths[i] * self.world

    def table(self, name: str) -> np.ndarray | None:
        """The rows of the unfinished table `name` (`Stats.add_table` without a finish), every rank's in rank
        order, [rows, K] (a view of `flat` where the ranks had as many rows); None where the step has no such
        table."""
        lay = self.layout
        if lay is None:
            return None
        at = lay.head + lay.n_lengths * self.world
        for i, (key, _) in enumerate(lay.vectors):
            if key.startswith(TABLE_PREFIX) and key not in lay.finishes:
                width, table = key[len(TABLE_PREFIX):].split(":", 1)
                if table == name:
                    return self._block(i, at).reshape(-1, int(width))
            at += self.widths[i] * self.world
        return None

    def _block(self, i: int, at: int) -> np.ndarray:
        """Vector `i`'s entries of every rank, which start at `at`: a view, or a copy without the padding."""
        width, world = self.widths[i], self.world
        block = self.flat[at : at + width * world]
        if world == 1:  # one rank: its own sizes are the widths
            return block
        counts = self.sizes()[:, i]
        if (counts == width).all():
            return block
        return np.concatenate([block[r * width : r * width + int(n)] for r, n in enumerate(counts.tolist())])


def _finalize_sums(h: list[float], lay: Layout, mins: list[float], maxs: list[float]) -> tuple[list, list]:
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


def check_layout(flat: np.ndarray, lay: Layout, world: int) -> None:
    """The ranks passed the same layout, and every on-device data check held."""
    n_sums, n_checks = len(lay.sum_slots), len(lay.checks)
    at = lay.head - 1
    if world > 1 and flat[at] != 1.0:  # one rank: its own fingerprint, nothing to compare
        raise RuntimeError("ranks passed different stats to reduce_stats (their keys or a finished table's "
                           "parameters, such as rollout_correction's thresholds, differ)")
    for argument, count in zip(lay.checks, flat[n_sums : n_sums + n_checks].tolist()):
        if count > 0:
            raise ValueError(lay.messages[argument])


def _unpack(g: GatheredStats) -> ReducedStats:
    lay, flat = g.layout, g.flat
    n_sums, n_checks = len(lay.sum_slots), len(lay.checks)
    k_min, k_max = len(lay.keys[Part.MIN]), len(lay.keys[Part.MAX])
    at = lay.head - 1
    host = flat[:at].tolist()  # Python floats: the scalars' parts
    mins = host[n_sums + n_checks : n_sums + n_checks + k_min]
    keys, pairs = _finalize_sums(host[:n_sums], lay, mins, host[at - k_max : at])
    sizes = g.sizes().astype(np.int64)
    samples, columns, summarized, tables, column_ranks = {}, {}, {}, {}, ()
    for i, (key, block) in enumerate(g.vectors()):
        if key in lay.finishes:  # finished here into ordinary stats (`Stats.add_table`)
            rows = tuple(tuple(rank) for rank in sizes[:, lay.call_slots[key]].tolist())
            # torch's float semantics, quietly: exp overflows to inf, NaN stays NaN
            with np.errstate(all="ignore"):
                _finish_table(key, block, lay, rows, keys, pairs, samples)
            continue
        block = block.tolist()
        if key.startswith(TABLE_PREFIX):  # "table:<width>:<name>": rows of every rank, in rank order, flat
            tables[key[len(TABLE_PREFIX):].split(":", 1)[1]] = block
        elif key.startswith(COLUMN_PREFIX):  # every row, in rank order; NaN: no value
            columns[key[len(COLUMN_PREFIX):]] = [x if x == x else None for x in block]
            column_ranks = tuple(sizes[:, i].tolist())
        elif key.startswith(SUMMARIZED_PREFIX):
            summarized[key] = [x for x in block if x == x]
        else:
            samples[key] = [x for x in block if x == x]  # x == x: not NaN
            if key in lay.grouped:  # rows in rank order, each rank's whole groups: the groups in order
                spreads = group_spread(block, lay.grouped[key][0])
                for gkey, spread in lay.grouped[key][1].items():
                    keys.append(gkey)
                    pairs.append(spreads[spread])
    at = lay.head + sizes.size + sum(g.widths) * g.world
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
    return ReducedStats(result, samples=samples, invalid=invalid, columns=columns, tables=tables,
                        column_ranks=column_ranks)


def _finish_table(key: str, block: np.ndarray, lay: Layout, rows: tuple[tuple[int, ...], ...], keys: list,
                  pairs: list, samples: dict[str, list[float]]) -> None:
    """A finished table's stats and per-sample values from its gathered rows, appended to `keys` / `pairs` /
    `samples`."""
    width = int(key[len(TABLE_PREFIX):].split(":", 1)[0])
    params, calls = lay.call_rows(key, rows)
    values, per_sample = lay.finishes[key][0](block.reshape(-1, width), params, calls)
    for name, (value, ok) in values.items():
        keys.append(name)
        pairs.append((float(value), bool(ok)))
    for name, values_ in per_sample.items():
        if name in samples:
            raise RuntimeError(f"per-sample key {name!r} made twice")
        samples[name] = [x for x in values_ if x == x]  # NaN: an invalid row, left out as from add_samples
