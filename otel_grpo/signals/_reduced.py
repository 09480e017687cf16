"""The finalized stats of one step: what `reduce_stats` returns and telemetry consumes."""

from __future__ import annotations


class ReducedStats(dict[str, float]):
    """Stat key -> finalized float, identical on every rank.

    Keys are catalog keys (`"kl"`, `"clip_ratio_low_mean"`), or `<key>/<label value>`
    for templated signals (`"reward_fn_mean/format"`). A stat with no valid
    element this step (a mean over zero tokens, the min of an empty set) is not
    a key; it is listed in `invalid` instead of being reported as NaN.

    Attributes:
        samples: catalog key of a per-sample signal (`"sample_reward"`, ...) ->
            the values of every valid sample of every rank, for histograms.
        invalid: stat keys that had no valid element this step.
        columns: per-sample columns (`Stats.add_column`, e.g. `sample_diagnostics`) -> one value
            per row of every rank, rank 0's rows first; None where a row has none.
        tables: per-row tables (`Stats.add_table` without a finish: a finished one's numbers are among the
            stats) -> their rows, flat (row-major: K floats a row, NaN kept;
            column j of every row is `table[j::K]`), every rank's, rank 0's first: a caller's own numbers,
            finished by the caller.
    """

    __slots__ = ("samples", "invalid", "columns", "tables", "column_ranks")

    def __init__(
        self,
        values: dict[str, float] | None = None,
        *,
        samples: dict[str, list[float]] | None = None,
        invalid: frozenset[str] = frozenset(),
        columns: dict[str, list[float | None]] | None = None,
        tables: dict[str, list[float]] | None = None,
        column_ranks: tuple[int, ...] = (),
    ) -> None:
        super().__init__(values or {})
        self.samples: dict[str, list[float]] = samples or {}
        self.invalid: frozenset[str] = invalid
        self.columns: dict[str, list[float | None]] = columns or {}
        self.tables: dict[str, list[float]] = tables or {}
        self.column_ranks: tuple[int, ...] = column_ranks
        """Each rank's rows of `columns`, in rank order (ranks may pass different numbers of rows)."""

    def column_rows(self, rank: int = 0, world: int = 1) -> list[dict[str, float]]:
        """This rank's rows of `columns`, one dict per sample in the order its stats were built; None values
        are left out. `world` must be the number of ranks that reduced.

            rows = [{**row, **extra} for row, extra in zip(rows, reduced.column_rows(rank, world))]
        """
        if not self.columns:
            return []
        if len(self.column_ranks) != world:
            raise ValueError(f"world: these stats were reduced over {len(self.column_ranks)} ranks, got {world}")
        if not 0 <= rank < world:
            raise ValueError(f"rank: expected 0 .. {world - 1}, got {rank}")
        start = sum(self.column_ranks[:rank])
        return [{k: v[i] for k, v in self.columns.items() if v[i] is not None}
                for i in range(start, start + self.column_ranks[rank])]

    def __repr__(self) -> str:
        return (
            f"ReducedStats({dict.__repr__(self)}, samples={ {k: len(v) for k, v in self.samples.items()} }, "
            f"invalid={sorted(self.invalid)})"
        )
