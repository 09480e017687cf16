"""A MaxEnt-GRPO `train/*` metrics dict (seed 000) maps onto the catalog: no `grpo.extra.*` gauge."""

from __future__ import annotations

# Every key the seed's build_training_metrics_dict can produce, re-typed from the seed; templated
# ones with a reward function `accuracy`, the entropy bonus and one KL length bucket.
_PLAIN = """
loss loss/total objective/minimize objective/maximize learning_rate global_step num_tokens avg_completion_tokens
ref_logp_mean beta tau kl_coeff grpo_objective kl_per_completion_token loss_per_completion_token grad_norm
vllm_latency_ms policy_entropy entropy_bonus_coef entropy_bonus_reward_std
loss/policy loss/kl loss/weighted_kl loss/clip
completions/mean_length_sampled completions/min_length_sampled completions/max_length_sampled
completions/clipped_frac completions/mean_length_terminated completions/min_length_terminated
completions/max_length_terminated
reward reward_std frac_reward_zero_std q_entropy_mean q_entropy_std q_entropy_min q_entropy_max
seed_grpo/semantic_entropy_mean seed_grpo/semantic_entropy_std seed_grpo/semantic_entropy_min
seed_grpo/semantic_entropy_max seed_grpo/advantage_scale_mean seed_grpo/advantage_scale_min
seed_grpo/advantage_scale_max seed_grpo/alpha_effective seed_grpo/max_possible_entropy
reward_without_entropy_bonus reward_with_entropy_bonus entropy_bonus_mean entropy_bonus_frac_of_base
entropy_bonus_frac_of_total
weight_entropy weight_entropy_norm weight_entropy_min weight_entropy_max advantage_entropy_mean
advantage_entropy_std weight_entropy_ema
weight_norm_denom weighting/tau weighting/beta tau_log q_temperature q_epsilon tau_lr tau_min tau_max
tau_warmup_steps tau_target_entropy tau_target_enabled tau_schedule_active kl_controller_target
kl_controller_horizon kl_controller_step_size kl_controller_enabled len_norm_ref maxent_objective delta_tau
delta_tau_abs delta_beta delta_beta_abs weighting/weight_norm_denom weighting/tau_log weighting/q_temperature
weighting/q_epsilon weighting/tau_lr weighting/tau_min weighting/tau_max weighting/tau_warmup_steps
weighting/tau_target_entropy weighting/tau_schedule_active weighting/delta_tau weighting/delta_tau_abs
weighting/delta_beta weighting/delta_beta_abs kl_error_to_target kl_ratio_to_target weight_entropy_error
weight_entropy_abs_error tau_loss meta/enabled meta/lr meta/update_interval meta/truncation_steps
meta/use_hessian meta/tau_grad meta/beta_grad meta/grad_norm meta/loss meta/tau_projected meta/beta_projected
weighting/tau_loss kl_controller/target kl_controller/horizon kl_controller/step_size kl_controller/enabled
clip_ratio clip_ratio/low_mean clip_ratio/low_min clip_ratio/high_mean clip_ratio/high_max clip_ratio/region_mean
kl
completions/diversity/distinct_1 completions/diversity/distinct_2 completions/diversity/jaccard
completions/diversity/distinct_1_micro completions/diversity/distinct_2_micro completions/diversity/jaccard_micro
""".split()
_QUANTILES = ("p00", "p05", "p25", "p50", "p75", "p95", "p100")
_TEMPLATED = (
    [f"reward_{q}" for q in _QUANTILES]
    + [f"rewards/{fn}/{stat}" for fn in ("accuracy", "entropy_bonus") for stat in ("mean", "std", *_QUANTILES)]
    + ["kl_per_token_bucket/le_64", "kl_per_token_bucket_tokens/le_64"]
)
# `train/epoch` is TRL's `epoch` too: the TRL integration's catalog entry (issue 11) takes its MaxEnt name.
SEED_000_KEYS = [f"train/{k}" for k in _PLAIN + _TEMPLATED]


def test_a_maxent_metrics_dict_produces_no_extra_gauges(captured):
    captured.tel.log_metrics(3, {key: 0.5 for key in SEED_000_KEYS})
    metrics = captured.metrics()
    assert [n for n in metrics if n.startswith("grpo.extra.")] == []
    assert metrics["grpo.maxent.tau"].data.data_points[0].value == 0.5
    per_fn = {dict(p.attributes)["reward_fn"] for p in metrics["grpo.reward_fn.p25"].data.data_points}
    assert per_fn == {"accuracy", "entropy_bonus"}
    assert len(SEED_000_KEYS) == len(set(SEED_000_KEYS)) > 150
