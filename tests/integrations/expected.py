"""Expected values from the tensors TRL produced (recorded by `trl_run.Recording`), through otel_grpo.signals.

One process, the concatenated batch: what `instrument` must export for a logged step
whatever the split over micro-batches, logged steps and ranks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from otel_grpo import signals


def _pad(tensors: list[torch.Tensor], value: float = 0.0) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    return torch.cat([F.pad(t, (0, width - t.shape[1]), value=value) for t in tensors])


def generation_stats(gens: list[dict], weights: list[float], names: list[str], group: int, eos: int,
                     sampling: tuple[str, str, tuple[float, float]] | None = None) -> signals.Stats:
    """`gens`: per rank, the same generation batch's records, in rank order."""
    rank_rows = [g["completion_ids"].shape[0] for g in gens]
    local = torch.cat([g["rewards_per_func"][r * n:(r + 1) * n] for r, (g, n) in enumerate(zip(gens, rank_rows))])
    total = (local * torch.tensor(weights)).nansum(1)
    stats = signals.reward_stats(total, group, {n: local[:, i] for i, n in enumerate(names)},
                                 torch.cat([g["advantages"] for g in gens]))
    mask = _pad([g["completion_mask"] for g in gens]).bool()
    ids = _pad([g["completion_ids"] for g in gens])
    lengths = mask.sum(-1)
    last = ids.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
    stats = stats | signals.length_stats(mask, last != eos)
    stats = stats | signals.diversity_stats(ids, mask)
    if sampling is not None:
        level, mode, threshold = sampling
        old, samp = _pad([g["old_per_token_logps"] for g in gens]), _pad([g["sampling_per_token_logps"] for g in gens])
        stats = stats | signals.rollout_correction(old, samp, mask, level=level, mode=mode, threshold=threshold,
                                                   with_mismatch=True).stats
    return stats


def micro_batch_stats(mbs: list[dict], eps: tuple[float, float], beta: float) -> signals.Stats:
    """Policy stats of the micro-batches of one step (all ranks), as one batch."""
    mask = _pad([m["completion_mask"] for m in mbs])
    logps = _pad([m["logps"] for m in mbs])
    old = _pad([m["old_per_token_logps"] if "old_per_token_logps" in m else m["logps"] for m in mbs])
    ref = _pad([m["ref_per_token_logps"] for m in mbs]) if beta else None
    ent = _pad([m["entropies"] for m in mbs])
    adv = torch.cat([m["advantages"] for m in mbs])
    return signals.policy_stats(logps, old, adv, mask, eps[0], eps[1], ref_logprobs=ref, entropy=ent)


def close(a: float, b: float, rel: float = 1e-5, abs_: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def as_logged(entry: dict) -> dict[str, float]:
    """What `grpo.trl.logged` holds for one entry of TRL's `log_history` (a training log): every finite number,
    by TRL's key, exactly as logged (None and the history's own `step` have none)."""
    return {k: v for k, v in entry.items() if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}


def as_logged_by_step(log_history: list[dict]) -> dict[int, dict[str, float]]:
    """`as_logged` of every training log (evaluations are grpo.eval), merged per step as the step's records are."""
    out: dict[int, dict[str, float]] = {}
    for entry in log_history:
        if not any(k.startswith("eval_") for k in entry):
            out.setdefault(entry["step"], {}).update(as_logged(entry))
    return out


def exported_as_logged(steps: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """The `trl_logged/<key>` scalars of each exported step (its `grpo.step` spans), by TRL's key."""
    prefix = "trl_logged/"
    out = {step: {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)} for step, values in steps.items()}
    return {step: values for step, values in out.items() if values}


def differences_from_trl(log_history: list[dict], steps: dict[int, dict[str, float]]) -> tuple[set[str], list]:
    """Every number TRL logged at a training step against the exported value under our name for it
    (`stat_key(..., "trl")`): the TRL keys compared, and (step, key, TRL's, ours) where they differ."""
    from otel_grpo.catalog import stat_key

    compared, differ = set(), []
    for entry in log_history:
        if "loss" not in entry:
            continue
        for name, value in entry.items():
            key = stat_key(name, "trl")
            if isinstance(value, float) and key in steps[entry["step"]]:
                compared.add(name)
                if not close(steps[entry["step"]][key], value):
                    differ.append((entry["step"], name, value, steps[entry["step"]][key]))
    return compared, differ
