"""Which TRL this adapter supports, and whether a trainer still has the members its hooks wrap."""

from __future__ import annotations

import importlib.metadata
from typing import Any

SUPPORTED_TRL = ">=1.16,<1.17"
"""The TRL versions the tests run against; outside them `instrument` falls back to the log-dict path."""

# Members wrapped or read by the hooks (private ones change between TRL releases).
_METHODS = (
    "_generate_and_score_completions", "_calculate_rewards", "_compute_loss", "_generate",
    "_get_per_token_logps_and_entropies", "training_step",
)
_ATTRIBUTES = (
    "accelerator", "args", "state", "model", "reward_funcs", "reward_func_names", "reward_weights",
    "num_generations", "beta", "epsilon_low", "epsilon_high", "eos_token_ids", "processing_class",
)


def unsupported(trainer: Any, version: str | None = None) -> str | None:
    """Why `trainer` cannot be instrumented from its tensors (one line), or None when it can."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        version = version or importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return "trl is not installed"
    try:
        if Version(version) not in SpecifierSet(SUPPORTED_TRL):
            return f"trl {version} is outside the supported range {SUPPORTED_TRL}"
    except InvalidVersion:
        return f"trl's version {version!r} cannot be parsed"
    missing = [m for m in _METHODS if not callable(getattr(trainer, m, None))]
    missing += [a for a in _ATTRIBUTES if not hasattr(trainer, a)]
    if missing:
        return f"{type(trainer).__name__} lacks {', '.join(missing)}"
    return None
