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
    """

    __slots__ = ("samples", "invalid")

    def __init__(
        self,
        values: dict[str, float] | None = None,
        *,
        samples: dict[str, list[float]] | None = None,
        invalid: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(values or {})
        self.samples: dict[str, list[float]] = samples or {}
        self.invalid: frozenset[str] = invalid

    def __repr__(self) -> str:
        return (
            f"ReducedStats({dict.__repr__(self)}, samples={ {k: len(v) for k, v in self.samples.items()} }, "
            f"invalid={sorted(self.invalid)})"
        )
