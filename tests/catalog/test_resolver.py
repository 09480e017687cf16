"""The one name resolver, per source: where peers' names collide, the source decides; otherwise every
source gives the same signal. `Telemetry.log_metrics`, the TRL integration and `follow` all use it."""

import pytest

from otel_grpo import catalog
from otel_grpo.catalog import resolve, stat_key


@pytest.mark.parametrize("name, source, key", [
    ("kl", None, "kl"),  # our key: plain k3
    ("kl", "trl", "trl_kl"),  # TRL's logged kl is its bias-corrected estimator
    ("kl", "verl", "kl"),  # verl logs no `kl`: the key
    ("actor/kl_loss", "verl", "kl"),
    ("actor/kl_loss", None, "kl"),
    ("train/kl", "maxent", "kl"),
    ("rollout_corr/kl", "verl", "mismatch_kl"),
    ("trl_kl", "trl", "trl_kl"),  # keys resolve under any source
    ("reward", "trl", "reward"),
    ("critic/score/mean", "verl", "reward"),
])
def test_each_source_resolves_its_names(name, source, key):
    assert resolve(name, source)[0].key == key
    assert stat_key(name, source) == key


def test_the_only_collision_is_trls_kl():
    """A name that means two signals exists only where a peer reuses one of our keys: the source is needed there."""
    collide = {s.trl for s in catalog.SIGNALS if s.trl and resolve(s.trl)[0].key != resolve(s.trl, "trl")[0].key}
    assert collide == {"kl"}


@pytest.mark.parametrize("source", [None, "trl"])
def test_templated_names_keep_slashes_in_the_label(source):
    """A reward model named `org/model` logs `rewards/org/model/mean`: one reward function, not an extra."""
    assert resolve("rewards/org/model/mean", source) == (catalog.get("reward_fn_mean"), {"reward_fn": "org/model"})
    assert stat_key("rewards/org/model/std", source) == "reward_fn_std/org/model"
    assert stat_key("eval_rewards/fmt/mean", source) == "eval_metric/rewards/fmt/mean"


def test_unknown_names_stay_and_a_bad_source_is_a_value_error():
    assert stat_key("my/custom", "trl") == "my/custom" and resolve("my/custom") is None
    with pytest.raises(ValueError, match="source"):
        resolve("kl", source="wandb")


@pytest.mark.parametrize("name, recorded", [
    ("reward", "eval_metric/reward"),  # a training step's statistic: the evaluation's, as `eval_reward`
    ("loss", "eval_metric/loss"),
    ("rewards/acc/mean", "eval_metric/rewards/acc/mean"),  # as `eval_rewards/acc/mean`: the name as given
    ("actor/kl_loss", "eval_metric/actor/kl_loss"),
    ("KL", "eval_metric/KL"),  # the emitter's sanitized name is grpo.kl: still a training statistic
    ("sample_reward", "eval_metric/sample_reward"),  # a histogram signal's value is no training sample either
    ("eval_reward", "eval_reward"),  # an evaluation metric already
    ("eval_metric/reward", "eval_metric/reward"),
    ("epoch", "epoch"),  # the trainer's state: transformers logs it beside its eval metrics
    ("learning_rate", "learning_rate"),
    ("step", None),  # the step index moves with training records only
    ("training/global_step", None),  # verl's name of it
    ("my_accuracy", "eval_metric/my_accuracy"),  # unknown: the evaluation's, not the training run's grpo.extra gauge
    ("val-core/acc", "val-core/acc"),  # verl's validation metric: an evaluation metric already, core/acc
    ("!!", "eval_metric/!!"),
])
def test_an_evaluations_keys(name, recorded):
    assert catalog.evaluation_key(name) == recorded
    if recorded is not None:
        found = resolve(recorded)
        assert found is None or found[0].key in {"eval_metric", *catalog.TRAINER_STATE}


def test_the_trainer_state_is_catalog_gauges():
    assert catalog.STATE_GAUGES <= catalog.TRAINER_STATE
    assert all(catalog.get(key).kind is catalog.Kind.GAUGE for key in catalog.TRAINER_STATE)
