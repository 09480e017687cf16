"""The catalog is the contract every other part derives from: check its invariants."""

import re

import pytest

from otel_grpo import catalog
from otel_grpo.catalog import Kind, Reduction, Signal

SEED_004_KEYS = {
    # rollout IS correction metrics of the verl-derived helper, without `mismatch/`
    "rollout_is_mean", "rollout_is_std", "rollout_is_min", "rollout_is_max",
    "rollout_is_eff_sample_size", "rollout_is_ratio_fraction_high", "rollout_is_ratio_fraction_low",
    "rollout_is_veto_fraction", "rollout_is_catastrophic_token_fraction", "rollout_is_masked_fraction",
    "rollout_is_seq_masked_fraction", "rollout_is_seq_mean", "rollout_is_seq_std", "rollout_is_seq_min",
    "rollout_is_seq_max", "rollout_is_seq_max_deviation", "rollout_is_seq_fraction_high",
    "rollout_is_seq_fraction_low",
    # mismatch metrics
    "mismatch_training_ppl", "mismatch_training_log_ppl", "mismatch_kl", "mismatch_k3_kl",
    "mismatch_rollout_ppl", "mismatch_rollout_log_ppl", "mismatch_log_ppl_diff",
    "mismatch_log_ppl_abs_diff", "mismatch_log_ppl_diff_max", "mismatch_log_ppl_diff_min",
    "mismatch_ppl_ratio", "mismatch_logprob_abs_diff",
}

TRL_GRPO_NAMES = [
    # TRL's GRPO logging docs, plus entropy, step_time and the vLLM IS metrics
    "num_tokens", "completions/mean_length", "completions/min_length", "completions/max_length",
    "completions/clipped_ratio", "completions/mean_terminated_length",
    "completions/min_terminated_length", "completions/max_terminated_length",
    "rewards/accuracy/mean", "rewards/accuracy/std", "reward", "reward_std", "kl",
    "clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max",
    "clip_ratio/region_mean", "frac_reward_zero_std", "entropy", "step_time",
    "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
    "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
    "sampling/importance_sampling_ratio/max", "loss", "grad_norm", "learning_rate",
]


def test_every_trl_grpo_metric_resolves():
    unresolved = [name for name in TRL_GRPO_NAMES if catalog.resolve(name) is None]
    assert unresolved == []


def test_seed_004_metrics_are_keys_with_their_helpers_names_as_other_names():
    """The seed-004 helper's `mismatch/*` names resolve; verl 0.9.1 never logs them (test_verl_coverage)."""
    keys = {s.key for s in catalog.SIGNALS}
    assert SEED_004_KEYS <= keys
    for key in SEED_004_KEYS:
        assert f"mismatch/{key}" in catalog.get(key).aliases
        assert catalog.resolve(f"mismatch/{key}")[0].key == key


def test_chi_square_and_maxent_coverage():
    for key in ["mismatch_chi2_token", "mismatch_chi2_seq", "reward_p05", "reward_p50", "reward_p95",
                "reward_fn_mean", "reward_fn_std", "advantage_mean", "advantage_std",
                "terminated_length_mean", "kl_seq_mean", "loss", "grad_norm", "learning_rate",
                "num_tokens", "distinct_1", "distinct_2", "entropy", "step_time"]:
        catalog.get(key)


def test_templated_alias_carries_its_label():
    signal, attrs = catalog.resolve("rewards/format_reward/std")
    assert (signal.key, attrs) == ("reward_fn_std", {"reward_fn": "format_reward"})
    assert catalog.resolve("reward_fn_mean/format_reward")[1] == {"reward_fn": "format_reward"}
    # a templated key without its label value is not a stat of its own
    assert catalog.resolve("reward_fn_mean") is None


def test_resolve_returns_a_fresh_dict_each_time():
    first = catalog.resolve("rewards/a/mean")
    first[1]["reward_fn"] = "mutated"
    assert catalog.resolve("rewards/a/mean")[1] == {"reward_fn": "a"}


def test_unknown_names_do_not_resolve():
    assert catalog.resolve("no/such/metric") is None
    with pytest.raises(KeyError, match="no_such"):
        catalog.get("no_such")


def test_names_units_and_prometheus_names_follow_the_conventions():
    prom_names = set()
    for s in catalog.SIGNALS:
        assert s.name.startswith("grpo.")
        assert s.unit != "1"
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s.prometheus_name)
        prom_names.add(s.prometheus_name)
        if s.kind is Kind.HISTOGRAM:
            assert s.buckets and list(s.buckets) == sorted(s.buckets)
    assert len(prom_names) == len(catalog.SIGNALS)
    assert catalog.get("steps").prometheus_name == "grpo_steps_total"
    assert catalog.get("phase_duration").prometheus_name == "grpo_phase_duration_seconds"
    assert catalog.get("clip_ratio_low_mean").prometheus_name == "grpo_clip_ratio_low"


def test_is_ratio_histogram_is_log_spaced_around_one():
    buckets = catalog.get("sample_is_ratio").buckets
    assert 1.0 in buckets and min(buckets) <= 0.01 and max(buckets) >= 100


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(unit="1"), "unit"),
        (dict(name="kl"), "grpo"),
        (dict(key="Bad-Key"), "snake_case"),
        (dict(kind=Kind.HISTOGRAM), "buckets"),
        (dict(trl="rewards/{fn}/mean"), "alias"),
    ],
)
def test_invalid_signal_definitions_are_rejected(kwargs, message):
    base = dict(key="x", name="grpo.x", kind=Kind.GAUGE, unit="{ratio}", description="d",
                reduction=Reduction.MEAN, group=catalog.Group.POLICY)
    with pytest.raises(ValueError, match=message):
        Signal(**{**base, **kwargs})


def test_sanitize_key():
    assert catalog.sanitize_key("train/foo-Bar") == "train_foo_bar"
    assert catalog.sanitize_key("9lives") == "m_9lives"
    with pytest.raises(ValueError, match="name"):
        catalog.sanitize_key("///")


def test_step_checks_and_their_fallbacks_are_per_step_gauges_of_one_unit():
    """A fallback is judged as its check (same series, same bounds): it must measure the same thing."""
    for check in catalog.STEP_CHECKS.values():
        own = catalog.get(check.key)
        for key in check.fallbacks:
            fallback = catalog.get(key)
            assert fallback.kind is own.kind is Kind.GAUGE and fallback.unit == own.unit, (check.key, key)
            assert key not in catalog.STEP_CHECKS, key  # judged as one check only
    assert catalog.STEP_CHECKS["kl"].fallbacks == ("trl_kl",)
    assert catalog.CHECK_INPUTS >= {"kl", "trl_kl", "grad_norm"}


def test_judged_takes_a_checks_own_key_else_its_first_fallback():
    kl, jump = catalog.STEP_CHECKS["kl"], catalog.STEP_CHECKS["kl_jump"]
    assert catalog.judged({"trl_kl": 2.0}) == [(kl, 2.0), (jump, 2.0)]
    assert catalog.judged({"trl_kl": 2.0, "kl": 0.5}) == [(kl, 0.5), (jump, 0.5)]
    assert catalog.judged({"loss": 1.0}) == []
    with pytest.raises(ValueError, match="no fallback of itself"):
        catalog.StepCheck("kl", (1.0,), fallbacks=("kl",))


def _streaks(name: str, values: list[float]) -> list[list[int]]:
    """The check's streaks (one per bound) after each of `values`."""
    state = catalog.Streaks(catalog.STEP_CHECKS[name])
    out = []
    for value in values:
        state.advance(value)
        out.append(list(state.counts))
    return out


TRENDS = ("kl_jump", "reward_collapse", "entropy_collapse", "throughput_drop")


def test_the_trend_checks_are_those_on_the_trend_baseline():
    assert catalog.TRENDS == TRENDS


@pytest.mark.parametrize("name", TRENDS)
def test_a_trend_is_judged_from_the_same_step_whatever_the_step_time(name):
    """The baseline is counted in steps: a change at the first judged step is seen there, one step before is not."""
    check = catalog.STEP_CHECKS[name]
    first = check.baseline.min_steps
    normal, broken = {"kl_jump": (0.02, 0.3), "reward_collapse": (0.6, 0.1), "entropy_collapse": (2.0, 0.2),
                      "throughput_drop": (1000.0, 300.0)}[name]
    assert not any(_streaks(name, [normal] * (first - 1) + [broken] * 3)[first - 1])
    assert max(_streaks(name, [normal] * first + [broken] * 3)[first + 2]) == 3


@pytest.mark.parametrize("name", TRENDS)
def test_a_streak_stays_out_of_its_baseline_and_a_lasting_change_becomes_the_norm(name):
    """Up to `gap` steps of a streak are left out of the baseline (streaks of 3 and 5 hold against the old
    normal); a change that lasts enters it, and the check stops holding."""
    gap = catalog.STEP_CHECKS[name].baseline.gap
    normal, broken = {"kl_jump": (0.02, 0.3), "reward_collapse": (0.6, 0.1), "entropy_collapse": (2.0, 0.2),
                      "throughput_drop": (1000.0, 300.0)}[name]
    after = _streaks(name, [normal] * 30 + [broken] * 60)
    assert [max(s) for s in after[30:30 + gap]] == list(range(1, gap + 1))
    assert after[-1] == [0] * len(after[-1])


def test_kl_climbing_from_zero_is_no_jump_and_one_absurd_step_moves_no_baseline():
    """Training starts at KL 0 and climbs: steadily or quadratically that is the run's normal. A jump is judged
    against the median and IQR, which one step of 1e11 does not move."""
    assert not any(map(any, _streaks("kl_jump", [0.0004 * i * i for i in range(40)])))
    assert not any(map(any, _streaks("kl_jump", [0.001 + 0.002 * i for i in range(40)])))
    after = _streaks("kl_jump", [0.02] * 20 + [1e11] + [0.02] * 19 + [0.08] * 3)
    assert after[-1][catalog.STEP_CHECKS["kl_jump"].bounds.index(4.0)] == 3
    assert not any(map(any, _streaks("kl_jump", [0.02] * 30 + [0.025] * 30)))  # 0.7 robust sigma


def test_a_reward_that_climbed_then_collapses_is_a_collapse():
    """The noise a drop is measured in comes from step-to-step differences: a climb of 0.33 over 12 steps is
    no noise (its spread would put the collapse at 2.7 standard deviations, under the bound of 3)."""
    bound = catalog.STEP_CHECKS["reward_collapse"].bounds.index(3.0)
    after = _streaks("reward_collapse", [0.3 + 0.03 * i for i in range(12)] + [0.05] * 3)
    assert after[-1][bound] == 3
    assert not any(map(any, _streaks("reward_collapse", [0.3 + 0.03 * i for i in range(40)])))
