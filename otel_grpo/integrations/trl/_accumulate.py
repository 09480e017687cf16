"""What a GRPOTrainer produced between two logged steps: its tensors and partial stats, sample batches, phases.

    acc = Accumulator(settings)
    acc.capture(micro_batch)            # per micro-batch and generation batch: references only
    acc.batches.append(sample_batch)    # a generation batch's sample rows, sent once its first loss pass is done
    acc.loss(loss, factor)              # a training step's loss (0-d, on device) and its scale
    acc.phase("rollout", seconds)       # a phase measured by a hook
    merged = acc.merged()               # at the logged step (local; may fail on one rank only)
    logged = acc.take(merged, accelerator)  # on every rank, if every rank merged: ONE reduce_stats

Captured tensors get their stats at the logged step, all micro-batches (and all generation
batches) at once: on a micro-batch's small tensors each torch op costs more in dispatch than
in arithmetic, so with `logging_steps` or gradient accumulation one pass over the
concatenation costs a fraction of one pass per batch. The micro-batches' pass makes one table
of per-row sums, counts and maxes (`_micro_batch`), the generation batches' one table of each
row's rewards, advantage and length (`_generation`); both travel in the same reduction, and from
them the host finishes every policy, reward and length stat and each sample row's numbers. That
pass and the reduction run under `torch.inference_mode` (no autograd bookkeeping per op; its share:
benchmarks/README.md, costs) and, on the CPU, in one intra-op thread (`signals.single_threaded`).
Beyond `FOLD_BYTES` of held tensors the stats are computed early, which bounds the device
memory held between logged steps. A sample batch goes out once its rows have all been through the
loss (their numbers are on the host by then).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch

from ... import signals
from ...telemetry import _clock as clock
from ._generation import Generation, generation_stats
from ._generation_rows import GENERATION_TABLE, SampleBatch, attach_generation
from ._logged import Logged
from ._micro_batch import MicroBatch, policy_table, sampler_batch_stats
from ._policy_rows import TABLE, attach
from ._settings import TrlSettings

FOLD_BYTES = 64 << 20
"""Captured tensors held before their stats are computed ahead of the logged step."""
_R = TypeVar("_R")


def _stats_pass(method: Callable[..., _R]) -> Callable[..., _R]:
    """An `Accumulator` method that runs torch ops on the captured tensors: no autograd, and on the CPU one
    intra-op thread (the captures' device)."""
    @functools.wraps(method)
    def run(self: Accumulator, *args: Any, **kwargs: Any) -> _R:
        with torch.inference_mode(), signals.single_threaded(self.device):
            return method(self, *args, **kwargs)
    return run


@dataclass(slots=True)
class Accumulator:
    settings: TrlSettings
    stats: list[signals.Stats] = field(default_factory=list)
    tables: list[torch.Tensor] = field(default_factory=list)
    """The micro-batches' per-row tables (`policy_table`), in capture order of their kinds' folds."""
    segments: list[tuple[int, SampleBatch | None]] = field(default_factory=list)
    """(rows, generation batch whose first pass it is, else None) of each micro-batch behind `tables`' rows."""
    generations: list[tuple[int, SampleBatch | None]] = field(default_factory=list)
    """(rows, sample batch) of each generation batch behind the generation table's rows, in its order."""
    captures: list[MicroBatch | Generation] = field(default_factory=list)
    held_bytes: int = 0
    batches: list[SampleBatch] = field(default_factory=list)
    phases: list[tuple[str, float, int]] = field(default_factory=list)
    ready: int = 0
    """The leading `batches` that go out at this logged step (`merged`): every row through the loss once."""
    losses: list[tuple[torch.Tensor, int]] = field(default_factory=list)
    """Each training step's loss (0-d, detached) and the factor transformers scales it by."""
    device: torch.device | None = None
    """Where the captured tensors are (the first capture's: one device per rank in a run)."""

    def capture(self, item: MicroBatch | Generation) -> None:
        """Keep `item`'s tensors for the logged step's one pass; compute now if too much is held."""
        if self.device is None:  # one device per rank for a run
            self.device = item.mask.device
        self.captures.append(item)
        self.held_bytes += item.nbytes
        if self.held_bytes > FOLD_BYTES:
            self._fold()

    def loss(self, value: torch.Tensor, factor: int) -> None:
        """A training step's loss: `loss` is their mean, each times `factor` (transformers logs the sum of a
        step's `training_step` losses over its optimizer steps, and `training_step` divided by the
        gradient accumulation steps). Kept as is: one stack at the logged step, no op per step."""
        self.losses.append((value, factor))

    def phase(self, name: str, seconds: float, end_ns: int | None = None) -> None:
        """A phase of `seconds` that ended at `end_ns` (default: now)."""
        self.phases.append((name, seconds, clock.now_ns() if end_ns is None else end_ns))

    @property
    def pending(self) -> bool:
        return bool(self.stats or self.tables or self.captures or self.batches or self.losses)

    @_stats_pass
    def _fold(self) -> None:
        """The stats of the captures so far: one pass per kind (same tensors present), in capture order."""
        groups: dict[tuple, list[Any]] = {}
        for item in self.captures:
            groups.setdefault((type(item), item.kind), []).append(item)
        self.captures, self.held_bytes = [], 0
        for (cls, _), items in groups.items():
            if cls is MicroBatch:
                self.tables.append(policy_table(self.settings, items))
                if items[0].measures_sampler:
                    self.stats.append(sampler_batch_stats(self.settings, items))
                self.segments += [(item.logps.shape[0], item.batch) for item in items]
            else:
                self.stats.append(generation_stats(self.settings, items))
                self.generations += [(len(item.lengths), item.batch) for item in items]

    @_stats_pass
    def merged(self, final: bool = False) -> signals.Stats:
        """This rank's stats since the last logged step, in one `Stats`; marks the sample batches ready to send
        (the leading ones whose rows have all been through the loss; every batch if `final`: training ended).
        Rows go out in generation order, so a later batch waits for an earlier one."""
        self._fold()
        self.ready = len(self.batches) if final else next(
            (i for i, batch in enumerate(self.batches) if batch.pending > 0), len(self.batches))
        if self.losses:
            self.stats.append(_loss_stats(self.losses))
            self.losses = []
        parts = self.stats  # in fold order: the generation table's rows in `generations`' order
        merged = parts[0].update(*parts[1:]) if parts else signals.Stats()  # in place: this accumulator's own
        if self.tables:
            merged.add_table(TABLE, torch.cat(self.tables) if len(self.tables) > 1 else self.tables[0])
        return merged

    @_stats_pass
    def take(self, merged: signals.Stats, accelerator: Any = None) -> Logged:
        """Gather `merged` (a collective: every rank calls it), give this rank's rows their numbers, and start
        afresh. The stats are finished later (`Logged.finish`), off the training thread."""
        try:
            gathered = signals.gather_stats(merged, accelerator)  # the logged step's one device-to-host copy
            self._attach(gathered)
            return Logged(gathered, self.settings, [count for count, _ in self.generations],
                          self.batches[: self.ready], self.phases)
        finally:
            kept = self.batches[self.ready :]  # still waiting for the loss
            self.clear()
            self.batches = kept

    def _attach(self, gathered: signals.GatheredStats) -> None:
        """This rank's rows' numbers to their sample batches (a batch that goes out now, or one still waiting
        for its other rows: here, as a waiting batch keeps them until a later step sends it)."""
        table = gathered.table(GENERATION_TABLE)
        if table is not None:
            attach_generation(self._own(table, sum(count for count, _ in self.generations)), self.generations)
        table = gathered.table(TABLE)
        if table is not None:
            attach(self._own(table, sum(count for count, _ in self.segments)), self.segments)

    def _own(self, table: Any, rows: int) -> Any:
        """This rank's `rows` rows of every rank's `table` ([rows * world, K] numpy, a view)."""
        rank = 0 if table.shape[0] == rows else self.settings.rank
        return table[rank * rows : (rank + 1) * rows]

    def clear(self) -> None:
        self.stats, self.captures, self.held_bytes, self.batches, self.phases = [], [], 0, [], []
        self.ready, self.losses, self.tables, self.segments, self.generations = 0, [], [], [], []


def _loss_stats(losses: list[tuple[torch.Tensor, int]]) -> signals.Stats:
    """`loss`: the mean of each loss times its factor, in a few ops for all of them."""
    values = torch.stack([v for v, _ in losses]).reshape(-1)
    factors = {f for _, f in losses}
    if len(factors) == 1:  # the usual case: one gradient accumulation setting
        scaled = values * factors.pop()
    else:
        scaled = values * signals.to_device([f for _, f in losses], values.device, values.dtype)
    return signals.Stats().add_mean("loss", scaled.double().sum(), float(len(losses)))
