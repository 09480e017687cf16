"""The host half of the generation batches' stats: the per-row table's columns, every reward, advantage and
length stat finished from every rank's rows, each sample row's numbers, and the sample rows themselves. No
torch: these may run in the telemetry process (`_logged`); `_generation` makes the table on the device.

    values, invalid, samples = generation_values(settings, rows, sizes)  # every reward/length stat
    attach_generation(rows, segments)                                    # each batch's rows, for its samples
    rows = sample_rows(batch, reward_names, group)                       # a batch's rows, for `Step.samples`
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ...signals._host import finish_vector, group_spread
from ...signals._summaries import (ADVANTAGE_SUMMARIES, LENGTH_SUMMARIES, REWARD_GROUPS, REWARD_QUANTILES,
                                   REWARD_SUMMARIES, TERMINATED_SUMMARIES, fn_quantiles, fn_summaries)
from ._chat import chat_text
from ._policy_rows import C, row_numbers
from ._settings import TrlSettings

GENERATION_TABLE = "trl_generation"
"""The table's name in `Stats.add_table` / `ReducedStats.tables`."""
# The table's columns, per row: its total reward as TRL weights it (NaN: no function scored it), its
# advantage, length and truncation (1.0: it hit the length limit), then each reward function's reward
# (NaN where the function scored none): `generation_columns(reward_names)`
ROW_COLUMNS = ("reward", "advantage", "length", "truncated")
# Each sample row's reward, advantage and per-function rewards come from its table row (`attach_generation`)
REWARD_COLUMN, ADVANTAGE_COLUMN, FN_COLUMN = "reward", "advantage", "rewards/"


@dataclass(slots=True)
class SampleBatch:
    """A generation batch's rows, kept until every row has been through the loss once: host columns here, their
    numbers (`numbers`) as the logged steps' copies bring them. Host data only: it goes to the telemetry
    process with the logged step that sends it."""

    prompts: list[Any]
    completions: list[Any]
    """This rank's prompts and completions (TRL's own lists, not copied)."""
    lengths: list[int]
    truncated: list[bool]
    first_index: int
    """Global index of this rank's first row (groups are global)."""
    policy_version: int
    generation_rows: Any = None
    """Its rows of the generation table ([size, K] float64, `generation_columns`), put here on the host when the
    logged step that reduced them comes back (`attach_generation`): rewards, advantage, truncation."""
    loss_rows: list[Any] = field(default_factory=list)
    """Its rows of the policy table from their first pass through the loss ([rows, len(COLUMNS)] float64 a
    micro-batch, rows in the loss's order: each carries its position; `_policy_rows.attach`)."""
    pending: int = 0
    """Rows not yet through their first loss pass (their per-sample diagnostics come from it)."""

    @property
    def size(self) -> int:
        return len(self.lengths)

    def numbers(self, reward_names: Sequence[str]) -> dict[int, dict[str, float]]:
        """Row position -> its numbers: its generation's (rewards, advantage, truncation: `length_clipped`) and its
        first loss pass's diagnostics (`row_numbers`); a number it lacks (NaN) left out. Made where the rows are
        (the telemetry process): the training thread only keeps the table rows."""
        names = generation_columns(reward_names)
        keep = [(j, "length_clipped" if name == "truncated" else name) for j, name in enumerate(names)
                if name != "length"]
        rows = [] if self.generation_rows is None else self.generation_rows.tolist()
        out = {i: {name: row[j] for j, name in keep if row[j] == row[j]} for i, row in enumerate(rows)}
        for block in self.loss_rows:
            for row in block.tolist():
                out.setdefault(int(row[C["position"]]), {}).update(row_numbers(row))
        return out


def generation_columns(reward_names: Sequence[str]) -> tuple[str, ...]:
    """The generation table's columns: `ROW_COLUMNS`, then each reward function's."""
    return ROW_COLUMNS + tuple(FN_COLUMN + name for name in reward_names)


def generation_values(settings: TrlSettings, table: Sequence[float],
                      sizes: Sequence[int]) -> tuple[dict[str, float], set[str], dict[str, list[float]]]:
    """Every reward, advantage and length stat of the rows of every rank (`generation_stats`' table, flat from
    the host copy, rank by rank; `sizes`: the rows of each generation batch in a rank's part, the same on every
    rank): (values, keys with no valid element, per-sample vectors for the histograms). The keys and
    arithmetic of `signals.reward_stats`, `advantage_stats` and `length_stats` on the batches taken together,
    finished as `reduce_stats` finishes per-sample vectors."""
    names = generation_columns(settings.reward_names)
    width = len(names)
    col = {name: table[j::width] for j, name in enumerate(names)}
    out: dict[str, float] = {}
    invalid: set[str] = set()
    samples: dict[str, list[float]] = {}

    def vector(key: str | None, values: Sequence[float], quantiles: dict, summaries: dict) -> None:
        """Finish `values`' quantiles and summaries; `key`: its histogram's per-sample signal (None: none)."""
        kept = [x for x in values if x == x]  # x == x: not NaN (a row without that number)
        if key is not None:
            samples[key] = kept
        for name, value, ok in finish_vector(kept, quantiles, summaries):
            if ok:
                out[name] = value
            else:
                invalid.add(name)

    vector("sample_reward", col["reward"], REWARD_QUANTILES, REWARD_SUMMARIES)
    for name in settings.reward_names:
        vector(f"sample_reward_fn/{name}", col[FN_COLUMN + name], fn_quantiles(name), fn_summaries(name))
    vector("sample_advantage", col["advantage"], {}, ADVANTAGE_SUMMARIES)
    lengths, truncated = col["length"], col["truncated"]
    vector("sample_completion_length", lengths, {}, LENGTH_SUMMARIES)
    vector(None, [n for n, t in zip(lengths, truncated) if not t], {}, TERMINATED_SUMMARIES)
    rows = len(lengths)
    out["samples"] = float(rows)
    if rows:
        out["completions_clipped_ratio"] = math.fsum(truncated) / rows
    else:
        invalid.add("completions_clipped_ratio")
    _group_spread(settings, col["reward"], sizes, out, invalid)
    return out, invalid, samples


def _group_spread(settings: TrlSettings, totals: Sequence[float], sizes: Sequence[int], out: dict[str, float],
                  invalid: set[str]) -> None:
    """`reward_group_std` and `frac_reward_zero_std` as `signals.reward_stats` finishes them, over groups of
    `num_generations` consecutive rows of one generation batch in TRL's order, which is rank by rank: the table
    holds each rank's rows of every batch in turn, so a batch's rows are gathered from every rank's part."""
    n = sum(sizes)
    world = len(totals) // n if n else 0
    ordered, at = [], 0
    for size in sizes:
        ordered += [x for r in range(world) for x in totals[r * n + at : r * n + at + size]]
        at += size
    spreads = group_spread(ordered, settings.num_generations)
    for key, spread in REWARD_GROUPS.items():
        value, ok = spreads[spread]
        if ok:
            out[key] = value
        else:
            invalid.add(key)


def attach_generation(table: Any, segments: Sequence[tuple[int, Any]]) -> None:
    """Give each sample batch its rows of this rank's part of the table ([rows, K] numpy; `segments`: the (row
    count, sample batch or None) of each generation batch behind the rows, in the same order): one slice a
    batch, their numbers made later (`SampleBatch.numbers`)."""
    at = 0
    for count, batch in segments:
        if batch is not None:
            batch.generation_rows = table[at : at + count]
        at += count


def sample_rows(batch: SampleBatch, names: Sequence[str], group: int) -> list[dict[str, Any]]:
    """The rows of one generation batch, each with its numbers (`SampleBatch.numbers`: its generation's rewards,
    advantage and truncation, its first loss pass's diagnostics) under its own columns. No device read: the
    numbers came in the logged steps' one copy each."""
    rows, numbered = [], batch.numbers(names)
    for i in range(batch.size):
        numbers = numbered.get(i, {})
        rewards = {n: numbers.pop(FN_COLUMN + n, math.nan) for n in names}  # NaN: the function scored no value
        reward, advantage = numbers.pop(REWARD_COLUMN, math.nan), numbers.pop(ADVANTAGE_COLUMN, math.nan)
        rows.append({**numbers,
            "prompt": chat_text(batch.prompts[i]), "completion": chat_text(batch.completions[i]),
            "reward": reward, "rewards": rewards, "advantage": advantage,
            "completion_length": batch.lengths[i], "terminated": not batch.truncated[i],
            "group": (batch.first_index + i) // group, "policy_version": batch.policy_version,
        })
    return rows
