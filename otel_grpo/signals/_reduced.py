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

    __slots__ = ("samples", "invalid", "columns", "tables")

    def __init__(
        self,
        values: dict[str, float] | None = None,
        *,
        samples: dict[str, list[float]] | None = None,
        invalid: frozenset[str] = frozenset(),
        columns: dict[str, list[float | None]] | None = None,
        tables: dict[str, list[float]] | None = None,
    ) -> None:
        super().__init__(values or {})
        self.samples: dict[str, list[float]] = samples or {}
        self.invalid: frozenset[str] = invalid
        self.columns: dict[str, list[float | None]] = columns or {}
        self.tables: dict[str, list[float]] = tables or {}

    def column_rows(self, rank: int = 0, world: int = 1) -> list[dict[str, float]]:
        """This rank's rows of `columns`, one dict per sample in the order its stats were built
        (ranks pass equal row counts, as `reduce_stats` requires); None values are left out.

            rows = [{**row, **extra} for row, extra in zip(rows, reduced.column_rows(rank, world))]
        """
        if not self.columns:
            return []
        n = len(next(iter(self.columns.values()))) // world
        return [{k: v[i] for k, v in self.columns.items() if v[i] is not None} for i in range(rank * n, rank * n + n)]

    def __repr__(self) -> str:
        return (
            f"ReducedStats({dict.__repr__(self)}, samples={ {k: len(v) for k, v in self.samples.items()} }, "
            f"invalid={sorted(self.invalid)})"
        )
