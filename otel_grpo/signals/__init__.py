"""Pure-torch GRPO signals: tensors in, partial aggregates out, reduced exactly across ranks."""

from ._reduced import ReducedStats

__all__ = ["ReducedStats"]
