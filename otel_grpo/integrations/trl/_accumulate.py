"""What a GRPOTrainer produced between two logged steps: partial stats on device, sample batches, phases.

    acc.add(stats)                      # per generation batch and per micro-batch: no host sync
    acc.phase("rollout", seconds)       # a phase measured by a hook
    merged = acc.merged()               # at the logged step (local; may fail on one rank only)
    logged = acc.take(merged, accelerator)  # on every rank, if every rank merged: ONE reduce_stats
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ... import signals
from ._generation import SampleBatch


@dataclass(slots=True)
class Logged:
    """One logged step's reduced stats, sample batches and phases (name, seconds, end in ns)."""

    stats: signals.ReducedStats
    batches: list[SampleBatch]
    phases: list[tuple[str, float, int]]


@dataclass(slots=True)
class Accumulator:
    stats: list[signals.Stats] = field(default_factory=list)
    batches: list[SampleBatch] = field(default_factory=list)
    phases: list[tuple[str, float, int]] = field(default_factory=list)

    def add(self, stats: signals.Stats) -> None:
        self.stats.append(stats)  # merged once, at the logged step

    def phase(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds, time.time_ns()))

    @property
    def pending(self) -> bool:
        return bool(self.stats or self.batches)

    def merged(self) -> signals.Stats:
        """This rank's stats since the last logged step, in one `Stats`."""
        if not self.stats:
            return signals.Stats()
        return self.stats[0].update(*self.stats[1:])  # in place: the parts are this accumulator's own

    def take(self, merged: signals.Stats, accelerator: Any = None) -> Logged:
        """Reduce `merged` (a collective: every rank calls it) and start afresh."""
        try:
            reduced = signals.reduce_stats(merged, accelerator)  # the logged step's one device-to-host copy
            return Logged(reduced, self.batches, self.phases)
        finally:
            self.clear()

    def clear(self) -> None:
        self.stats, self.batches, self.phases = [], [], []
