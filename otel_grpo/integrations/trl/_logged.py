"""A logged step's host half: what the training thread hands over (`Logged`: the step's gathered copy, its
sample batches and phases, TRL's logs) and its recording off that thread (`record_logged`, through
`Step.defer`: in the telemetry process, which imports no torch, or on the telemetry thread).

    with telemetry.logged_step(step) as s:
        s.defer(record_logged, logged, logs, host_scalars)   # training thread: a reference, no work
    # later, elsewhere: every stat finished, TRL's logs merged with them, the phases and the sample rows recorded
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...signals._gathered import GatheredStats
from ...signals._reduced import ReducedStats
from ._generation_rows import GENERATION_TABLE, SampleBatch, generation_values, sample_rows
from ._keys import map_logs
from ._policy_rows import TABLE, policy_values
from ._settings import TrlSettings

if TYPE_CHECKING:
    from ...telemetry import Step

@dataclass(slots=True)
class Logged:
    """One logged step as the training thread leaves it: its stats gathered and copied but not finished, the
    sample batches that go out (their rows' numbers on the host) and phases (name, seconds, end in ns). Host
    data only: `finish()` may run in the telemetry process (`Step.defer`)."""

    gathered: GatheredStats
    settings: TrlSettings
    generation_sizes: list[int]
    """The rows of each generation batch behind the generation table, in a rank's part of it."""
    batches: list[SampleBatch]
    phases: list[tuple[str, float, int]]

    def finish(self) -> ReducedStats:
        """Every stat of the step: `reduce_stats`' finishing, then the policy, reward and length stats from every
        rank's table rows."""
        reduced = self.gathered.finish()
        table = reduced.tables.pop(GENERATION_TABLE, None)
        if table is not None:
            values, invalid, samples = generation_values(self.settings, table, self.generation_sizes)
            _add(reduced, values, invalid)
            reduced.samples.update(samples)
        table = reduced.tables.pop(TABLE, None)
        if table is not None:
            _add(reduced, *policy_values(self.settings, table))
        return reduced


def _add(reduced: ReducedStats, values: dict[str, float], invalid: set[str]) -> None:
    reduced.update(values)
    reduced.invalid = reduced.invalid | invalid


def record_logged(s: Step, logged: Logged, logs: dict, host: dict[str, float]) -> None:
    """Record one logged step into `s`: every stat finished from its copy, TRL's logged values where no exact
    one was computed, the host scalars (`host`: step, beta, tokens), the phases and the sample rows."""
    stats = logged.finish()
    computed = _bases(frozenset(stats).union(stats.invalid))
    # Under a signal's name, TRL's own (mean-of-means) value of a key computed exactly from its tensors
    # gives way to the exact one, unless both found no valid value (TRL's None): that NaN goes on to be
    # counted in grpo.nonfinite. TRL's number stays, as logged, in `trl_logged/<key>` (grpo.trl.logged).
    scalars = {k: v for k, v in map_logs(logs).items()
               if k.partition("/")[0] not in computed or (k in stats.invalid and math.isnan(v))}
    scalars.update(host)
    for name, seconds, end_ns in logged.phases:
        s.record_phase(name, seconds, end_ns=end_ns)
    s.record(stats, **scalars)
    settings = logged.settings
    for batch in logged.batches:
        s.samples(sample_rows(batch, settings.reward_names, settings.num_generations))


@functools.lru_cache(maxsize=32)
def _bases(keys: frozenset[str]) -> frozenset[str]:
    """Signal names of stat keys (`reward_fn_mean/fmt` -> `reward_fn_mean`); the same keys every step."""
    return frozenset(k.partition("/")[0] for k in keys)
