"""One test per peer alias: the peer's formula, re-typed from its source, on random tensors, against ours.

Sources: TRL 1.16 `trainer/grpo_trainer.py` (`_compute_loss`, `_generate_and_score_completions`),
TRL's former PPOTrainer (`policy/approxkl_avg`, ...), verl 0.9.1 `trainer/ppo/core_algos.py`
(`compute_policy_loss_vanilla`, `kl_penalty_forward`, `agg_loss`), `trainer/ppo/metric_utils.py`
(`compute_data_metrics`), `trainer/ppo/rollout_corr_helper.py` (`compute_offpolicy_metrics`), and the
MaxEnt-GRPO metrics module (seed 000, `_quantile_stats`). "Processes" are row slices of one batch:
a peer's gather is a concatenation, its all-reduce a sum.
"""

from __future__ import annotations

import math

import pytest
import torch

from otel_grpo import catalog
from otel_grpo.catalog._table import FOLLOW_ONLY
from otel_grpo.signals import length_stats, mismatch_stats, policy_stats, reduce_stats, reward_stats, rollout_correction

B, T, G, EPS_LOW, EPS_HIGH, CLIP_C = 12, 9, 4, 0.2, 0.28, 3.0


@pytest.fixture(params=range(3))
def batch(request) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(request.param)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).double()
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    logp = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.5
    ref = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.3
    rollout = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.2
    rewards = torch.randint(0, 3, (B,), generator=g).double() / 2
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    return dict(mask=mask, old=old, logp=logp, ref=ref, rollout=rollout, rewards=rewards, adv=adv, lengths=lengths,
                entropy=torch.rand(B, T, generator=g, dtype=torch.float64) * 2,
                fn=torch.rand(B, generator=g, dtype=torch.float64))


def _ours(b) -> dict[str, float]:
    m = b["mask"]
    truncated = b["lengths"] == T  # no EOS: the completion filled the budget
    stats = policy_stats(b["logp"], b["old"], b["adv"], m, EPS_LOW, EPS_HIGH, ref_logprobs=b["ref"],
                         entropy=b["entropy"], clip_ratio_c=CLIP_C)
    stats |= reward_stats(b["rewards"], G, {"acc": b["fn"]}, advantages=b["adv"])
    stats |= length_stats(m, truncated) | mismatch_stats(b["old"], b["rollout"], m)
    return reduce_stats(stats)


def _alias(name: str) -> str:
    found = catalog.resolve(name)
    assert found is not None, name
    signal, labels = found
    return f"{signal.key}/{next(iter(labels.values()))}" if labels else signal.key


# ---- re-typed peer helpers ----------------------------------------------------------------
def verl_masked_mean(values, mask, axis=None):
    s = (values * mask).sum() if axis is None else (values * mask).sum(axis)
    return s / ((mask.sum() if axis is None else mask.sum(axis)) + 1e-8)


def trl_global_masked_mean(x, mask, processes=2):
    # each process sums its rows; accelerator.reduce(sum) adds them
    parts = [(x[r] * mask[r]).sum() for r in torch.arange(B).chunk(processes)]
    counts = [mask[r].sum() for r in torch.arange(B).chunk(processes)]
    return sum(parts) / max(sum(counts), 1.0)


def trl_nanstd(x):
    variance = torch.nanmean((x - torch.nanmean(x)) ** 2)
    count = torch.sum(~torch.isnan(x))
    return torch.sqrt(variance * (count / (count - 1)))


def trl_coef_1(b):
    return torch.exp(b["logp"] - b["old"])


def seed_quantile(values, q):
    vals = sorted(float(v) for v in values)
    if q <= 0:
        return vals[0]
    if q >= 1:
        return vals[-1]
    pos = q * (len(vals) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] if lo == hi else vals[lo] * (1 - (pos - lo)) + vals[hi] * (pos - lo)


# ---- the peers' formulas, by the name they log ----------------------------------------------
def _trl_low(b):
    return (trl_coef_1(b) < 1 - EPS_LOW) & (b["adv"].unsqueeze(1) < 0)


def _trl_high(b):
    return (trl_coef_1(b) > 1 + EPS_HIGH) & (b["adv"].unsqueeze(1) > 0)


def _trl_seq_mean(x, mask):
    return (x * mask).sum(-1) / mask.sum(-1)  # NaN for a sequence without tokens: nanmin skips it


def _verl_pg(b):
    negative_approx_kl = torch.clamp(b["logp"] - b["old"], min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    a = b["adv"].unsqueeze(1).expand(B, T)
    pg_losses1 = -a * ratio
    pg_losses2 = -a * torch.clamp(ratio, 1 - EPS_LOW, 1 + EPS_HIGH)
    return negative_approx_kl, a, pg_losses1, pg_losses2


def _verl_clipfrac_lower(b):
    _, a, pg1, pg2 = _verl_pg(b)
    clip_pg_losses1 = torch.maximum(pg1, pg2)
    pg_losses3 = -a * CLIP_C
    return verl_masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (a < 0).float(), b["mask"])


def _verl_low_var_kl(b):
    kl = torch.clamp(b["ref"] - b["logp"], min=-20, max=20)
    kld = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    return (kld * b["mask"]).sum() / b["mask"].sum()  # agg_loss token-mean, one rank


def _verl_offpolicy(b, key):
    old, rollout, mask = b["old"], b["rollout"], b["mask"]
    mean_lp_train = verl_masked_mean(old, mask, axis=-1)
    mean_lp_rollout = verl_masked_mean(rollout, mask, axis=-1)
    log_ratio = old - rollout
    log_ppl_diff = mean_lp_rollout - mean_lp_train
    rho_token = torch.exp(torch.clamp(log_ratio, min=-20, max=20))
    log_ratio_sum = (log_ratio * mask).sum(-1)
    return {
        "training_ppl": torch.exp(-mean_lp_train).mean(),
        "training_log_ppl": (-mean_lp_train).mean(),
        "kl": verl_masked_mean(rollout - old, mask),
        "k3_kl": verl_masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask),
        "rollout_ppl": torch.exp(-mean_lp_rollout).mean(),
        "rollout_log_ppl": (-mean_lp_rollout).mean(),
        "log_ppl_diff": log_ppl_diff.mean(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean(),
        "log_ppl_diff_max": log_ppl_diff.max(),
        "log_ppl_diff_min": log_ppl_diff.min(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean(),
        "chi2_token": verl_masked_mean(rho_token.square(), mask) - 1.0,
        "chi2_seq": torch.exp(2.0 * torch.clamp(log_ratio_sum, min=-20, max=20)).mean() - 1.0,
    }[key]


def _verl_adv(b):
    adv = b["adv"].unsqueeze(1).expand(B, T)
    return torch.masked_select(adv, b["mask"].bool())


def _trl_groups_zero_std(b):
    std_rewards = b["rewards"].view(-1, G).std(dim=1)
    return torch.isclose(std_rewards, torch.zeros_like(std_rewards)).float().mean()


def _trl_terminated(b):
    lengths = b["mask"].sum(-1)
    return lengths[~(b["lengths"] == T)]


PEERS = {
    # TRL 1.16 GRPO (one micro-batch over two processes)
    "reward": lambda b: torch.nanmean(b["rewards"]),
    "reward_std": lambda b: trl_nanstd(b["rewards"]),
    "rewards/acc/mean": lambda b: torch.nanmean(b["fn"]),
    "rewards/acc/std": lambda b: trl_nanstd(b["fn"]),
    "frac_reward_zero_std": _trl_groups_zero_std,
    "completions/mean_length": lambda b: b["mask"].sum(-1).float().mean(),
    "completions/min_length": lambda b: b["mask"].sum(-1).float().min(),
    "completions/max_length": lambda b: b["mask"].sum(-1).float().max(),
    "completions/clipped_ratio": lambda b: (b["lengths"] == T).float().mean(),
    "completions/mean_terminated_length": lambda b: _trl_terminated(b).float().mean(),
    "completions/min_terminated_length": lambda b: _trl_terminated(b).float().min(),
    "completions/max_terminated_length": lambda b: _trl_terminated(b).float().max(),
    "clip_ratio/low_mean": lambda b: trl_global_masked_mean(_trl_low(b).float(), b["mask"]),
    "clip_ratio/high_mean": lambda b: trl_global_masked_mean(_trl_high(b).float(), b["mask"]),
    "clip_ratio/region_mean": lambda b: trl_global_masked_mean((_trl_low(b) | _trl_high(b)).float(), b["mask"]),
    "clip_ratio/low_min": lambda b: torch.min(_trl_seq_mean(_trl_low(b).float(), b["mask"])),
    "clip_ratio/high_max": lambda b: torch.max(_trl_seq_mean(_trl_high(b).float(), b["mask"])),
    "entropy": lambda b: trl_global_masked_mean(b["entropy"], b["mask"]),
    "kl": lambda b: trl_global_masked_mean(torch.exp(b["ref"] - b["logp"]) - (b["ref"] - b["logp"]) - 1, b["mask"]),
    # verl 0.9.1
    "actor/ppo_kl": lambda b: verl_masked_mean(-_verl_pg(b)[0], b["mask"]),
    "actor/pg_clipfrac": lambda b: verl_masked_mean(torch.gt(_verl_pg(b)[3], _verl_pg(b)[2]).float(), b["mask"]),
    "actor/pg_clipfrac_lower": _verl_clipfrac_lower,
    "actor/kl_loss": _verl_low_var_kl,
    "actor/entropy": lambda b: (b["entropy"] * b["mask"]).sum() / b["mask"].sum(),
    "critic/score/mean": lambda b: b["rewards"].mean(),
    "critic/score/max": lambda b: b["rewards"].max(),
    "critic/score/min": lambda b: b["rewards"].min(),
    "critic/advantages/mean": lambda b: torch.mean(_verl_adv(b)),
    "critic/advantages/max": lambda b: torch.max(_verl_adv(b)),
    "critic/advantages/min": lambda b: torch.min(_verl_adv(b)),
    "response_length/mean": lambda b: b["mask"].sum(-1).mean(),
    "response_length/max": lambda b: b["mask"].sum(-1).max(),
    "response_length/min": lambda b: b["mask"].sum(-1).min(),
    "response_length/clip_ratio": lambda b: torch.eq(b["mask"].sum(-1), T).float().mean(),
    **{f"rollout_corr/{k}": (lambda b, k=k: _verl_offpolicy(b, k)) for k in (
        "training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff",
        "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq")},
    # TRL's former PPOTrainer, on a batch without padding (it averages over every position)
    "policy/approxkl_avg": lambda b: 0.5 * ((b["logp"] - b["old"]) ** 2).mean(),
    "val/ratio": lambda b: torch.exp(b["logp"] - b["old"]).mean(),
    "policy/clipfrac_avg": lambda b: (torch.gt(_verl_pg(b)[3], _verl_pg(b)[2])).float().mean(),
    "policy/entropy_avg": lambda b: b["entropy"].mean(),
    "objective/kl": lambda b: (b["logp"] - b["ref"]).sum(1).mean(),
    # MaxEnt-GRPO (seed 000): linear-interpolated quantiles of the gathered values
    **{f"train/reward_{q}": (lambda b, x=x: seed_quantile(b["rewards"], x)) for q, x in (
        ("p00", 0.0), ("p05", 0.05), ("p25", 0.25), ("p50", 0.5), ("p75", 0.75), ("p95", 0.95), ("p100", 1.0))},
    **{f"train/rewards/acc/{q}": (lambda b, x=x: seed_quantile(b["fn"], x)) for q, x in (
        ("p00", 0.0), ("p25", 0.25), ("p50", 0.5), ("p100", 1.0))},
    "train/reward": lambda b: sum(b["rewards"].tolist()) / B,
}
# PPO averages over every position: compare on a batch whose mask is all ones
FULL_MASK = {"policy/approxkl_avg", "val/ratio", "policy/clipfrac_avg", "policy/entropy_avg", "objective/kl"}


@pytest.mark.parametrize("name", sorted(PEERS))
def test_peer_formula_equals_ours(name, batch):
    if name in FULL_MASK:
        batch = {**batch, "mask": torch.ones(B, T, dtype=torch.float64), "lengths": torch.full((B,), T)}
    peer = float(PEERS[name](batch))
    assert _ours(batch)[_alias(name)] == pytest.approx(peer, rel=1e-6, abs=1e-7), name


def test_every_trl_grpo_and_verl_alias_has_a_formula_here():
    # TRL's sampling/* and the seed-004 mismatch/* names have their own tests (issue 11's
    # integration, test_rollout_is / test_mismatch); host values (loss, grad_norm, lr, ...) are passed through.
    # FOLLOW_ONLY signals only ever hold verl's own logged values (`otel-grpo follow`): nothing to re-type.
    passed_through = {s.key for s in catalog.SIGNALS if s.reduction is catalog.Reduction.HOST} | FOLLOW_ONLY
    names = {a.replace("{reward_fn}", "acc") for s in catalog.SIGNALS if s.key not in passed_through
             for a in (s.trl, s.verl) if a}
    untested = {n for n in names - set(PEERS) if not n.startswith(("sampling/", "mismatch/"))}
    # passed through by loss_stats (and TRL's own policy_loss as TRL logs it): no formula of ours
    assert untested == {"actor/pg_loss", "actor/loss", "loss", "policy_loss"}


def test_training_perplexity_without_rollout_logprobs(batch):
    # verl computes training_ppl always, the rest only with rollout log-probs; padding may hold anything
    garbage = torch.where(batch["mask"].bool(), batch["old"], float("nan"))
    alone = reduce_stats(mismatch_stats(garbage, None, batch["mask"]))
    assert set(alone) == {"mismatch_training_ppl", "mismatch_training_log_ppl"}
    for key in ("training_ppl", "training_log_ppl"):
        peer = float(_verl_offpolicy(batch, key))
        assert alone[f"mismatch_{key}"] == pytest.approx(peer, rel=1e-9) == _ours(batch)[f"mismatch_{key}"]


def test_verl_kl_loss_differs_only_past_its_clamp():
    # one token with k3 > 10: verl clamps it, ours does not (the catalog says so)
    logp = torch.zeros(1, 2, dtype=torch.float64)
    ref = torch.tensor([[0.0, 3.0]], dtype=torch.float64)  # k3 = e^3 - 3 - 1 = 16.1
    b = dict(ref=ref, logp=logp, mask=torch.ones(1, 2, dtype=torch.float64))
    ours = reduce_stats(policy_stats(logp, logp, torch.zeros(1), b["mask"], 0.2, 0.2, ref_logprobs=ref))["kl"]
    assert float(_verl_low_var_kl(b)) == pytest.approx(10 / 2)
    assert ours == pytest.approx((math.exp(3) - 4) / 2)
    assert "clamps" in catalog.get("kl").difference("verl")


def test_maxent_std_is_population_ours_is_sample():
    x = torch.tensor([0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    ours = reduce_stats(reward_stats(x, 2))["reward_std"]
    assert ours == pytest.approx(float(x.std()))  # n - 1
    assert ours * math.sqrt(3 / 4) == pytest.approx(0.5)  # the seed's population std
    assert "population" in catalog.get("reward_std").difference("maxent")


def test_verl_091_rollout_is_mean_is_another_number_than_seed_004s(batch):
    # verl 0.9.1 compute_rollout_correction_weights (token level, TIS): the mean of the truncated weights;
    # seed 004 (verl's older mismatch helper), ours: the mean before truncation. No alias joins them.
    upper, mask = 1.2, batch["mask"]
    log_ratio = batch["logp"] - batch["rollout"]
    raw = torch.exp(torch.clamp(log_ratio, min=-20, max=20)) * mask
    verl_091 = float(verl_masked_mean(raw.clamp(max=upper), mask))
    ours = reduce_stats(rollout_correction(batch["logp"], batch["rollout"], mask, threshold=(1 / upper, upper)).stats)
    assert ours["rollout_is_mean"] == pytest.approx(float(verl_masked_mean(raw, mask)), rel=1e-6)
    assert ours["rollout_is_mean"] > verl_091 + 1e-3
    assert catalog.resolve("rollout_corr/rollout_is_mean") is None
