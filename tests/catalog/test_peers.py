"""Peer names: each resolves to one signal, differences are declared per peer, the docs' "same" means same."""

import pytest

from otel_grpo import catalog
from otel_grpo.catalog import Kind, Reduction, Signal


def test_no_peer_name_resolves_to_two_signals():
    owner: dict[str, str] = {}
    for s in catalog.SIGNALS:
        for alias in s.all_aliases:
            assert owner.setdefault(alias, s.key) == s.key, f"{alias!r} names {owner[alias]!r} and {s.key!r}"
    assert "actor/ppo_kl" in owner and "train/tau" in owner


@pytest.mark.parametrize("name, key", [
    ("actor/ppo_kl", "ppo_kl"),  # verl's k1, not our k2 approx_kl
    ("actor/pg_clipfrac_lower", "dual_clip_fraction"),  # verl's dual-clip fraction, not TRL's low clip
    ("actor/pg_loss", "loss_policy"),  # verl's policy term, not the total loss
    ("critic/advantages/mean", "advantage_token_mean"),  # verl's token-weighted mean
    ("perf/throughput", "tokens_per_second_per_gpu"),
    ("rollout_corr/k3_kl", "mismatch_k3_kl"),
    ("policy/approxkl_avg", "approx_kl"),  # TRL PPO's k2
    ("objective/kl", "kl_k1_seq_mean"),
    ("train/weighting/tau", "maxent_tau"),
    ("train/loss/weighted_kl", "loss_kl"),
])
def test_peer_names_resolve_to_the_signal_computed_their_way(name, key):
    assert catalog.resolve(name)[0].key == key


def test_differences_name_a_peer_the_signal_has():
    for s in catalog.SIGNALS:
        for peer, how in s.differs:
            has = {"trl": s.trl, "verl": s.verl, "maxent": s.maxent, "other": s.aliases}[peer]
            assert has, (s.key, peer)
            assert s.difference(peer) == how


def test_a_difference_must_name_a_known_peer():
    with pytest.raises(ValueError, match="differs"):
        Signal("x", "grpo.x", Kind.GAUGE, "{ratio}", "d", Reduction.MEAN, catalog.Group.POLICY,
               differs=(("wandb", "other"),))


def test_peer_names_list_each_peers_name_of_a_signal_in_catalog_order():
    verl = catalog.peer_names("verl")
    assert verl == [(s.verl, s) for s in catalog.SIGNALS if s.verl] and ("actor/ppo_kl", catalog.get("ppo_kl")) in verl
    assert ("kl", catalog.get("trl_kl")) in catalog.peer_names("trl")
    with pytest.raises(ValueError, match="peer: 'wandb'"):
        catalog.peer_names("wandb")
