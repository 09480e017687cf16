"""Sample selection per step over every rank (torchforge's `global_reduce`): scores travel, then only the kept rows.

    kept, pool = select_across_ranks(calls, settings, rng, group)   # every rank, on the training thread
    # kept: on rank 0 the step's kept rows of every rank (Selected), None elsewhere; pool: every rank's row count

Two object collectives per step, whatever the number of rows or `samples()` calls:
an all-gather of each rank's scores (floats, never text) with rank 0's random seed,
after which every rank computes the same selection, and a gather to rank 0 of the
rows each rank holds among the kept ones.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ._retention import RowBudget
from ._samples import Selected, StepRows, pick_rows
from ._settings import TelemetrySettings


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """The torch.distributed default group as the exchange uses it."""

    dist: Any
    rank: int
    world: int


def current_group() -> ProcessGroup | None:
    """The initialized torch.distributed default group when it has more than one process."""
    torch = sys.modules.get("torch")  # a run without torch has no process group: never import it here
    if torch is None:
        return None
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    return ProcessGroup(dist, dist.get_rank(), world) if world > 1 else None


def select_across_ranks(
    calls: Sequence[tuple[int, Sequence[Mapping[str, Any]], int | None]],
    settings: TelemetrySettings,
    rng: random.Random,
    group: ProcessGroup,
    keep_reason: str | None = None,
    budget: RowBudget | None = None,
) -> tuple[list[Selected] | None, int]:
    """Top / bottom / random rows of the step over every rank (or all of them, for an anomalous
    step: rank 0's `keep_reason`, within `budget`, which every rank counts alike): the kept rows on
    rank 0, None elsewhere, and how many rows every rank handed.

    Every rank must call this once per step (with no rows if it has none). `Selected.index`
    is the row's position among every rank's rows, rank by rank; rows carry their group
    context (`StepRows.annotated`) and `source_rank`.
    """
    dist, rank, world = group.dist, group.rank, group.world
    rows = StepRows(calls, settings.score)
    seed = rng.getrandbits(63) if rank == 0 else None  # rank 0's draw: the same random picks everywhere
    verdict = keep_reason if rank == 0 else None  # rank 0's verdict: the same rows kept everywhere
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (rows.scores, seed, verdict))  # collective 1: scores only
    starts, flat = [], []
    for scores, _, _ in gathered:
        starts.append(len(flat))
        flat += scores
    _, seed, verdict = gathered[0]
    picked = pick_rows(flat, settings, verdict, budget or RowBudget(settings), random.Random(seed))
    reason = verdict if picked and picked[0][1] == "all" else None
    mine_from, mine_to = starts[rank], starts[rank] + len(rows.rows)
    mine = [(order, index, selection, rows.annotated(index - mine_from, rank, reason))
            for order, (index, selection) in enumerate(picked) if mine_from <= index < mine_to]
    received: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, received, dst=0)  # collective 2: the kept rows only
    if received is None:
        return None, len(flat)
    kept = sorted((item for part in received for item in part), key=lambda item: item[0])
    return [Selected(index, selection, row) for _, index, selection, row in kept], len(flat)
