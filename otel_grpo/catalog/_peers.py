"""What the peers call our signals and how their numbers differ, and the signals the seeds name that GRPO lacked.

Checked against the peers' code, not their docs: TRL 1.16 `trainer/grpo_trainer.py`
(and TRL's former PPOTrainer for the `objective/*`, `policy/*`, `loss/*`, `val/*`
names of seed 002), verl 0.9.1 `trainer/ppo/core_algos.py`, `metric_utils.py`,
`rollout_corr_helper.py`, `workers/utils/losses.py`, and the MaxEnt-GRPO metrics
module (seed 000). `_table` appends `seed_signals()` to the catalog and applies
`NOTES` to its entries; docs/signals.md is generated from the result.
"""

from __future__ import annotations

from dataclasses import replace

from ._signal import Group, Kind, Reduction, Signal

R = Reduction
M = "train/"  # the MaxEnt-GRPO module logs every key under `train/`

# ---- differences that hold for many signals --------------------------------------
MICRO = ("TRL logs each micro-batch's value and averages them over the logging window; ours pools the tokens "
         "of every micro-batch merged into the step's Stats (equal with one micro-batch per step)")
VERL_MICRO = ("verl computes it per micro-batch and rank and averages those values; ours pools every token of "
              "the step on every rank")
RANKS = ("the helper averages per-rank values (one all-reduce per key); ours pools every rank's elements exactly "
         "(two ranks: rollout_is_mean 1.083 pooled vs 1.048 averaged, rollout_is_std 0.440 vs 0.255)")
GEN = ("TRL computes it per generation batch and logs the mean of those values over the logging window; ours is "
       "computed once over every generation batch the logged step covers (equal with one generation batch per "
       "logged step)")
POPULATION = "population std (divides by n); ours is the sample std (n - 1), as torch and TRL"
EMPTY = "with no element TRL reports 0.0; ours is invalid (not exported that step)"
TRL_CLIPS = ("; with importance_sampling_level='sequence' (GSPO, luspo) TRL clips and counts whole sequences, and "
             "with delta (two-sided GRPO) it caps the ratio at delta before the clip test (no high clip when delta <= "
             "1 + epsilon_high); the TRL integration does both; with loss types cispo, sapo and vespo (no two-sided "
             "clip) it exports none")
ONE_SCORED = "; where only one row has a reward (the others None), TRL logs None (its std of one value is NaN), ours 0"
NON_ABORTED = "verl excludes aborted (zero-length) responses; ours counts every completion with a finite reward"


def _g(key, name, unit, desc, red, group, trl=None, verl=None, label=None, **more) -> Signal:
    return Signal(key, name, Kind.GAUGE, unit, desc, red, group, trl, verl, label, **more)


def _maxent(key: str, desc: str, *names: str, unit: str = "{value}") -> Signal:
    """A MaxEnt-GRPO-specific scalar: a host value the trainer logs, first name primary."""
    primary, *more = (M + n for n in names)
    return _g(f"maxent_{key}", f"grpo.maxent.{key}", unit, desc, R.HOST, Group.MAXENT, maxent=primary,
              aliases=tuple(more))


_QUANTILE_NAMES = {"p00": "Minimum (0th percentile)", "p25": "25th percentile", "p75": "75th percentile",
                   "p100": "Maximum (100th percentile)"}
FN_QUANTILES = ("p00", "p05", "p25", "p50", "p75", "p95", "p100")


def seed_signals(reward_buckets: tuple[float, ...]) -> tuple[Signal, ...]:
    """Signals seeds 000, 002 and 004 and verl's code name that the catalog did not have."""
    return _policy_signals() + _reward_signals(reward_buckets) + _diversity_signals() + _maxent_signals()


def _policy_signals() -> tuple[Signal, ...]:
    return (
        _g("ppo_kl", "grpo.policy.ppo_kl", "{nat}", "k1 KL between the old and the current policy as verl's `actor/ppo_kl`: mean over completion tokens of log pi_old - log pi_theta, the log ratio clamped to +-20.", R.MEAN, Group.POLICY, None, "actor/ppo_kl", differs=(("verl", VERL_MICRO),)),
        _g("dual_clip_fraction", "grpo.clip_ratio.dual", "{ratio}", "Dual-clip fraction as verl's `actor/pg_clipfrac_lower`: token fraction with negative advantage and ratio > clip_ratio_c (3.0 by default), where dual-clip PPO bounds the loss.", R.MEAN, Group.POLICY, None, "actor/pg_clipfrac_lower", differs=(("verl", VERL_MICRO),)),
        _g("advantage_token_mean", "grpo.advantage.token_mean", "{advantage}", "Token-weighted mean advantage: mean over completion tokens of each token's advantage (verl's `critic/advantages/mean`); differs from `advantage_mean` when lengths differ.", R.MEAN, Group.ADVANTAGE, None, "critic/advantages/mean"),
        _g("ref_logp_mean", "grpo.kl.ref_logp_mean", "{nat}", "Mean over completion tokens of the reference policy's log-probability of the sampled token.", R.MEAN, Group.KL, maxent=M + "ref_logp_mean", differs=(("maxent", "the seed's batch pipeline computes it from its reference scores; its reduction is not in the seed"),)),
        _g("kl_k1_seq_mean", "grpo.kl.k1_per_sequence", "{nat}", "Mean over completions of the summed per-token k1 KL log pi_theta - log pi_ref (KL per completion, TRL PPO's `objective/kl` with its default k1 estimator).", R.MEAN, Group.KL, aliases=("objective/kl",), differs=(("other", "TRL PPO's objective/kl also counts completions without tokens (0) in its mean over completions"),)),
        _g("kl_by_length", "grpo.kl.by_length", "{nat}", "k3 KL to the reference per completion token over the completions whose length falls in a bucket (attribute `length_bucket`: le_64 ... le_4096, gt_4096).", R.MEAN, Group.KL, None, None, "length_bucket", maxent=M + "kl_per_token_bucket/{length_bucket}", differs=(("maxent", "the seed's bucket edges are not in the seed; ours are powers of two from 64 to 4096 tokens"),)),
        _g("kl_by_length_tokens", "grpo.kl.by_length_tokens", "{token}", "Completion tokens in each `kl_by_length` bucket this step (attribute `length_bucket`).", R.SUM, Group.KL, None, None, "length_bucket", maxent=M + "kl_per_token_bucket_tokens/{length_bucket}", differs=(("maxent", "the seed's bucket edges are not in the seed; ours are powers of two from 64 to 4096 tokens"),)),
        _g("loss_policy", "grpo.loss.policy", "{loss}", "Policy-gradient term of the loss (clipped surrogate, without KL or entropy terms), mean over micro-batches.", R.MEAN, Group.OPTIM, None, "actor/pg_loss", maxent=M + "loss/policy", aliases=("loss/policy_avg",), differs=(("verl", "aggregated per micro-batch by loss_agg_mode, then averaged over micro-batches and ranks"), ("other", "TRL PPO's loss/policy_avg averages over PPO epochs and minibatches"))),
        _g("loss_kl", "grpo.loss.kl", "{loss}", "KL term as added to the loss, beta * KL, mean over micro-batches.", R.MEAN, Group.OPTIM, maxent=M + "loss/weighted_kl"),
        _g("loss_entropy", "grpo.loss.entropy", "{loss}", "Entropy term as added to the loss (e.g. -coef * mean entropy; 0 without a bonus), mean over micro-batches.", R.MEAN, Group.OPTIM),
        _g("tokens_per_second_per_gpu", "grpo.throughput_per_gpu", "{token_per_s}", "Tokens of the step per second of step wall time per GPU: tokens / (step time * GPUs), as verl's `perf/throughput`.", R.HOST, Group.THROUGHPUT, None, "perf/throughput"),
        _g("rollout_is_valid", "grpo.rollout_is.valid", "{ratio}", "Fraction of ranks whose batch had a completion token when the IS correction ran (seed 004's per-rank `valid`; 1 when every rank had tokens; ranks without any add nothing to the IS stats).", R.MEAN, Group.ROLLOUT_IS, None, None, aliases=("mismatch/valid",), differs=(("other", "the helper logs a per-rank boolean and drops invalid ranks from its merge; ours is the fraction of valid ranks"),)),
    )


def _reward_signals(reward_buckets: tuple[float, ...]) -> tuple[Signal, ...]:
    total = tuple(
        _g(f"reward_{q}", f"grpo.reward.{q}", "{reward}", f"{_QUANTILE_NAMES[q]} of the total reward (from the gathered per-completion rewards, linear interpolation).", R.QUANTILE, Group.REWARD, maxent=f"{M}reward_{q}")
        for q in ("p00", "p25", "p75", "p100")
    )
    per_fn = tuple(
        _g(f"reward_fn_{q}", f"grpo.reward_fn.{q}", "{reward}", f"Percentile {q[1:]} of one reward function's reward over every completion of the step (attribute `reward_fn`).", R.QUANTILE, Group.REWARD, None, None, "reward_fn", maxent=f"{M}rewards/{{reward_fn}}/{q}")
        for q in FN_QUANTILES
    )
    histogram = Signal("sample_reward_fn", "grpo.sample.reward_fn", Kind.HISTOGRAM, "{reward}", "Reward of each completion from one reward function (attribute `reward_fn`).", R.SAMPLES, Group.REWARD, label="reward_fn", buckets=reward_buckets)
    return total + per_fn + (histogram,)


def _diversity_signals() -> tuple[Signal, ...]:
    return (
        _g("distinct_1_group", "grpo.completion.distinct_1_group", "{ratio}", "Mean over prompt groups of distinct unigrams / unigrams among the group's completions (diversity within a group).", R.MEAN, Group.LENGTH),
        _g("distinct_2_group", "grpo.completion.distinct_2_group", "{ratio}", "Mean over prompt groups of distinct bigrams / bigrams among the group's completions.", R.MEAN, Group.LENGTH),
        _g("jaccard_group", "grpo.completion.jaccard_group", "{ratio}", "Mean over prompt groups of the mean pairwise Jaccard similarity |A & B| / |A | B| of the completions' token sets (1: the group's completions use the same tokens).", R.MEAN, Group.LENGTH, maxent=M + "completions/diversity/jaccard", differs=(("maxent", "the seed tokenizes the completion text with its own tokenizer; ours compares token ids"),)),
    )


def _maxent_signals() -> tuple[Signal, ...]:
    """MaxEnt-GRPO's weighting, entropy-bonus, q-entropy, SEED-GRPO and controller scalars (seed 000)."""
    return (
        _maxent("tau", "Temperature tau of the MaxEnt weighting.", "tau", "weighting/tau"),
        _maxent("tau_log", "log tau as the controller keeps it.", "tau_log", "weighting/tau_log"),
        _maxent("tau_lr", "Effective learning rate of the tau controller.", "tau_lr", "weighting/tau_lr"),
        _maxent("tau_min", "Lower bound of tau.", "tau_min", "weighting/tau_min"),
        _maxent("tau_max", "Upper bound of tau.", "tau_max", "weighting/tau_max"),
        _maxent("tau_warmup_steps", "Steps before the tau schedule starts.", "tau_warmup_steps", "weighting/tau_warmup_steps", unit="{step}"),
        _maxent("tau_target_entropy", "Weight-entropy target of the tau controller (0 when none).", "tau_target_entropy", "weighting/tau_target_entropy", unit="{nat}"),
        _maxent("tau_target_enabled", "1 when a weight-entropy target is set.", "tau_target_enabled", unit="{bool}"),
        _maxent("tau_schedule_active", "1 while the tau schedule adjusts tau.", "tau_schedule_active", "weighting/tau_schedule_active", unit="{bool}"),
        _maxent("tau_loss", "0.5 * (weight entropy - target)^2, the tau controller's loss.", "tau_loss", "weighting/tau_loss"),
        _maxent("delta_tau", "Change of tau since the previous step.", "delta_tau", "weighting/delta_tau"),
        _maxent("delta_tau_abs", "|delta tau|.", "delta_tau_abs", "weighting/delta_tau_abs"),
        _maxent("delta_beta", "Change of beta since the previous step.", "delta_beta", "weighting/delta_beta"),
        _maxent("delta_beta_abs", "|delta beta|.", "delta_beta_abs", "weighting/delta_beta_abs"),
        _maxent("weight_entropy", "Entropy of the MaxEnt weighting distribution over a group's completions.", "weight_entropy", unit="{nat}"),
        _maxent("weight_entropy_norm", "Weight entropy normalized by its maximum.", "weight_entropy_norm", unit="{ratio}"),
        _maxent("weight_entropy_min", "Smallest per-group weight entropy.", "weight_entropy_min", unit="{nat}"),
        _maxent("weight_entropy_max", "Largest per-group weight entropy.", "weight_entropy_max", unit="{nat}"),
        _maxent("weight_entropy_ema", "Exponential moving average of the weight entropy (the tau controller's input).", "weight_entropy_ema", unit="{nat}"),
        _maxent("weight_entropy_error", "Weight entropy - its target.", "weight_entropy_error", unit="{nat}"),
        _maxent("weight_entropy_abs_error", "|weight entropy - target|.", "weight_entropy_abs_error", unit="{nat}"),
        _maxent("advantage_entropy_mean", "Mean entropy of the advantage-derived weights.", "advantage_entropy_mean", unit="{nat}"),
        _maxent("advantage_entropy_std", "Standard deviation of the advantage-derived weight entropy.", "advantage_entropy_std", unit="{nat}"),
        _maxent("weight_norm_denom", "Normalizer of the weighting.", "weight_norm_denom", "weighting/weight_norm_denom"),
        _maxent("q_temperature", "Temperature of the q distribution.", "q_temperature", "weighting/q_temperature"),
        _maxent("q_epsilon", "Smoothing epsilon of the q distribution.", "q_epsilon", "weighting/q_epsilon"),
        _maxent("q_entropy_mean", "Mean entropy of the q distribution over groups.", "q_entropy_mean", unit="{nat}"),
        _maxent("q_entropy_std", "Standard deviation of the q entropy.", "q_entropy_std", unit="{nat}"),
        _maxent("q_entropy_min", "Smallest q entropy.", "q_entropy_min", unit="{nat}"),
        _maxent("q_entropy_max", "Largest q entropy.", "q_entropy_max", unit="{nat}"),
        _maxent("entropy_bonus_coef", "Coefficient of the entropy bonus.", "entropy_bonus_coef", unit="{coef}"),
        _maxent("entropy_bonus_mean", "Mean entropy-bonus reward.", "entropy_bonus_mean", unit="{reward}"),
        _maxent("entropy_bonus_frac_of_base", "Entropy bonus / |reward without the bonus|.", "entropy_bonus_frac_of_base", unit="{ratio}"),
        _maxent("entropy_bonus_frac_of_total", "Entropy bonus / |reward with the bonus|.", "entropy_bonus_frac_of_total", unit="{ratio}"),
        _maxent("entropy_bonus_reward_std", "Standard deviation of the entropy-bonus reward.", "entropy_bonus_reward_std", unit="{reward}"),
        _maxent("reward_with_entropy_bonus", "Mean reward including the entropy bonus.", "reward_with_entropy_bonus", unit="{reward}"),
        _maxent("reward_without_entropy_bonus", "Mean reward without the entropy bonus.", "reward_without_entropy_bonus", unit="{reward}"),
        _maxent("seed_semantic_entropy_mean", "SEED-GRPO: mean semantic entropy of a prompt's completions.", "seed_grpo/semantic_entropy_mean", unit="{nat}"),
        _maxent("seed_semantic_entropy_std", "SEED-GRPO: standard deviation of the semantic entropy.", "seed_grpo/semantic_entropy_std", unit="{nat}"),
        _maxent("seed_semantic_entropy_min", "SEED-GRPO: smallest semantic entropy.", "seed_grpo/semantic_entropy_min", unit="{nat}"),
        _maxent("seed_semantic_entropy_max", "SEED-GRPO: largest semantic entropy.", "seed_grpo/semantic_entropy_max", unit="{nat}"),
        _maxent("seed_advantage_scale_mean", "SEED-GRPO: mean advantage scale from the semantic entropy.", "seed_grpo/advantage_scale_mean"),
        _maxent("seed_advantage_scale_min", "SEED-GRPO: smallest advantage scale.", "seed_grpo/advantage_scale_min"),
        _maxent("seed_advantage_scale_max", "SEED-GRPO: largest advantage scale.", "seed_grpo/advantage_scale_max"),
        _maxent("seed_alpha_effective", "SEED-GRPO: effective alpha.", "seed_grpo/alpha_effective"),
        _maxent("seed_max_possible_entropy", "SEED-GRPO: largest possible semantic entropy.", "seed_grpo/max_possible_entropy", unit="{nat}"),
        _maxent("kl_controller_target", "KL controller: target KL.", "kl_controller_target", "kl_controller/target", unit="{nat}"),
        _maxent("kl_controller_horizon", "KL controller: horizon.", "kl_controller_horizon", "kl_controller/horizon", unit="{step}"),
        _maxent("kl_controller_step_size", "KL controller: step size.", "kl_controller_step_size", "kl_controller/step_size"),
        _maxent("kl_controller_enabled", "KL controller: 1 when enabled.", "kl_controller_enabled", "kl_controller/enabled", unit="{bool}"),
        _maxent("kl_error_to_target", "KL - KL target.", "kl_error_to_target", unit="{nat}"),
        _maxent("kl_ratio_to_target", "KL / KL target.", "kl_ratio_to_target", unit="{ratio}"),
        _maxent("kl_per_completion_token", "The seed's KL loss scalar / completion tokens of the batch.", "kl_per_completion_token", unit="{nat}"),
        _maxent("loss_per_completion_token", "Total loss / completion tokens of the batch.", "loss_per_completion_token", unit="{loss}"),
        _maxent("loss_clip", "Clip term of the loss, when the seed computes one.", "loss/clip", unit="{loss}"),
        _maxent("objective_maximize", "-(total loss): the objective maximized.", "objective/maximize", unit="{loss}"),
        _maxent("len_norm_ref", "1 when the reference log-probs are length-normalized.", "len_norm_ref", unit="{bool}"),
        _maxent("maxent_objective", "1 when training the MaxEnt objective.", "maxent_objective", unit="{bool}"),
        _maxent("grpo_objective", "1 when training the plain GRPO objective.", "grpo_objective", unit="{bool}"),
        _maxent("vllm_latency", "Latency of the vLLM generation call in milliseconds.", "vllm_latency_ms", unit="{ms}"),
        _maxent("distinct_1_micro", "Distinct-1 of one micro-batch's completions, as the seed's diversity helper reports it.", "completions/diversity/distinct_1_micro", unit="{ratio}"),
        _maxent("distinct_2_micro", "Distinct-2 of one micro-batch's completions, as the seed's diversity helper reports it.", "completions/diversity/distinct_2_micro", unit="{ratio}"),
        _maxent("jaccard_micro", "Jaccard similarity within one micro-batch, as the seed's diversity helper reports it.", "completions/diversity/jaccard_micro", unit="{ratio}"),
        _maxent("meta_enabled", "Meta-controller: 1 when enabled.", "meta/enabled", unit="{bool}"),
        _maxent("meta_lr", "Meta-controller: learning rate.", "meta/lr"),
        _maxent("meta_update_interval", "Meta-controller: steps between updates.", "meta/update_interval", unit="{step}"),
        _maxent("meta_truncation_steps", "Meta-controller: truncation steps.", "meta/truncation_steps", unit="{step}"),
        _maxent("meta_use_hessian", "Meta-controller: 1 when it uses the Hessian.", "meta/use_hessian", unit="{bool}"),
        _maxent("meta_tau_grad", "Meta-controller: gradient with respect to tau.", "meta/tau_grad"),
        _maxent("meta_beta_grad", "Meta-controller: gradient with respect to beta.", "meta/beta_grad"),
        _maxent("meta_grad_norm", "Meta-controller: norm of (tau grad, beta grad).", "meta/grad_norm", unit="{norm}"),
        _maxent("meta_loss", "Meta-controller: its loss.", "meta/loss", unit="{loss}"),
        _maxent("meta_tau_projected", "Meta-controller: 1 when tau was projected onto its bounds.", "meta/tau_projected", unit="{bool}"),
        _maxent("meta_beta_projected", "Meta-controller: 1 when beta was projected onto its bounds.", "meta/beta_projected", unit="{bool}"),
    )


# ---- peer names and differences of existing entries -------------------------------
# key -> Signal fields to set: `maxent`, further `aliases`, `differs`. Kept apart from
# the table's lines so that entries others add or edit merge without touching these.
NOTES: dict[str, dict] = {
    "rollout_is_seq_max_deviation": dict(aliases=("mismatch/rollout_is_seq_max_deviation",)),
    "rollout_is_seq_max": dict(aliases=("mismatch/rollout_is_seq_max",)),
    "rollout_is_seq_min": dict(aliases=("mismatch/rollout_is_seq_min",)),
    "rollout_is_max": dict(aliases=("mismatch/rollout_is_max",)),
    "rollout_is_min": dict(aliases=("mismatch/rollout_is_min",)),
    "reward": dict(maxent=M + "reward", aliases=("objective/scores",), differs=(("verl", NON_ABORTED),)),
    "reward_std": dict(maxent=M + "reward_std", differs=(("maxent", POPULATION), ("trl", GEN + ONE_SCORED))),
    "reward_min": dict(differs=(("verl", NON_ABORTED),)),
    "reward_max": dict(differs=(("verl", NON_ABORTED),)),
    "reward_p05": dict(maxent=M + "reward_p05"),
    "reward_p50": dict(maxent=M + "reward_p50"),
    "reward_p95": dict(maxent=M + "reward_p95"),
    "frac_reward_zero_std": dict(maxent=M + "frac_reward_zero_std", differs=(("maxent", "the seed counts groups whose advantages are all |a| < 1e-8; ours groups whose reward std (n - 1) is <= 1e-8, as TRL"), ("trl", "with scale_rewards='batch' or multi_objective_aggregation='normalize_then_sum' TRL logs whether the whole batch's reward std is zero (0 or 1); ours stays the fraction of prompt groups without a learning signal; a group in which the reward functions scored one row (None for the others) TRL counts as one with a spread (its std is NaN), ours as one without (TRL zeroes its advantages)"))),
    "reward_fn_mean": dict(maxent=M + "rewards/{reward_fn}/mean"),
    "reward_fn_std": dict(maxent=M + "rewards/{reward_fn}/std", differs=(("maxent", POPULATION), ("trl", GEN + ONE_SCORED))),
    "advantage_min": dict(differs=(("verl", "verl takes it over response tokens, so completions without tokens are left out"),)),
    "advantage_max": dict(differs=(("verl", "verl takes it over response tokens, so completions without tokens are left out"),)),
    "completion_length_mean": dict(maxent=M + "completions/mean_length_sampled", aliases=(M + "avg_completion_tokens",), differs=(("other", "train/avg_completion_tokens: the seed's own average of completion tokens (its reduction is not in the seed)"),)),
    "completion_length_min": dict(maxent=M + "completions/min_length_sampled", differs=(("trl", GEN),)),
    "completion_length_max": dict(maxent=M + "completions/max_length_sampled", differs=(("trl", GEN),)),
    "completions_clipped_ratio": dict(maxent=M + "completions/clipped_frac", differs=(("verl", "verl counts responses whose length equals max_response_length, so one ending with EOS at the last position counts; ours counts completions without EOS"),)),
    "terminated_length_mean": dict(maxent=M + "completions/mean_length_terminated", differs=(("trl", EMPTY + "; " + GEN), ("maxent", "with no terminated completion the seed reports 0; ours is invalid"))),
    "terminated_length_min": dict(maxent=M + "completions/min_length_terminated", differs=(("trl", EMPTY + "; " + GEN), ("maxent", "with no terminated completion the seed reports 0; ours is invalid"))),
    "terminated_length_max": dict(maxent=M + "completions/max_length_terminated", differs=(("trl", EMPTY + "; " + GEN), ("maxent", "with no terminated completion the seed reports 0; ours is invalid"))),
    "distinct_1": dict(maxent=M + "completions/diversity/distinct_1", differs=(("maxent", "the seed tokenizes the completion text with its own tokenizer; ours counts token ids"),)),
    "distinct_2": dict(maxent=M + "completions/diversity/distinct_2", differs=(("maxent", "the seed tokenizes the completion text with its own tokenizer; ours counts token ids"),)),
    "clip_ratio_low_mean": dict(maxent=M + "clip_ratio/low_mean", differs=(("trl", MICRO + TRL_CLIPS),)),
    "clip_ratio_low_min": dict(maxent=M + "clip_ratio/low_min", differs=(("trl", "TRL takes the min per micro-batch and logs the mean of those minima over the logging window; ours is the min over every sequence of the step (equal with one micro-batch per step)" + TRL_CLIPS),)),
    "clip_ratio_high_mean": dict(maxent=M + "clip_ratio/high_mean", differs=(("trl", MICRO + TRL_CLIPS),)),
    "clip_ratio_high_max": dict(maxent=M + "clip_ratio/high_max", differs=(("trl", "TRL takes the max per micro-batch and logs the mean of those maxima over the logging window; ours is the max over every sequence of the step (equal with one micro-batch per step)" + TRL_CLIPS),)),
    "clip_ratio_region_mean": dict(maxent=M + "clip_ratio/region_mean", aliases=(M + "clip_ratio", "policy/clipfrac_avg"), differs=(("trl", MICRO + TRL_CLIPS), ("other", "train/clip_ratio: the seed's diagnostics clip ratio (its definition is not in the seed); TRL PPO's policy/clipfrac_avg: the same token set, averaged over PPO minibatches"), ("verl", "verl's torch.gt(-A * clip(r), -A * r) selects the same tokens; " + VERL_MICRO))),
    "policy_ratio_mean": dict(aliases=("val/ratio",), differs=(("other", "TRL PPO's val/ratio averages over every position of each minibatch, padding included (ratio 1 there)"),)),
    "approx_kl": dict(aliases=("policy/approxkl_avg",), differs=(("other", "TRL PPO's policy/approxkl_avg averages over every position of each minibatch, padding included (0 there), then over minibatches"),)),
    "entropy": dict(maxent=M + "policy_entropy", aliases=("policy/entropy_avg",), differs=(("trl", MICRO), ("other", "TRL PPO's policy/entropy_avg averages over every position, padding included"), ("verl", "verl logs the entropy of the old policy, recomputed before the update, aggregated by loss_agg_mode over the whole batch (token-mean: the same number when the policy has not moved)"))),
    "kl": dict(maxent=M + "kl", aliases=(M + "loss/kl",), differs=(("other", "train/loss/kl: the KL term of the seed's loss before beta"), ("verl", "verl's default kl_loss_type low_var_kl clamps the log ratio to +-20 and each token's k3 to [-10, 10], per micro-batch; equal unless a token's KL exceeds 10"), ("maxent", "the seed's kl_value and loss/kl (the KL term before beta) come from its loss, estimator and token averaging as its loss computes them"))),
    "mismatch_kl": dict(aliases=("mismatch/mismatch_kl",), differs=(("other", RANKS),)),
    "mismatch_k3_kl": dict(aliases=("mismatch/mismatch_k3_kl",), differs=(("other", RANKS),)),
    "mismatch_training_ppl": dict(aliases=("mismatch/mismatch_training_ppl",), differs=(("other", RANKS),)),
    "mismatch_training_log_ppl": dict(aliases=("mismatch/mismatch_training_log_ppl",), differs=(("other", RANKS),)),
    "mismatch_rollout_ppl": dict(aliases=("mismatch/mismatch_rollout_ppl",), differs=(("other", RANKS),)),
    "mismatch_rollout_log_ppl": dict(aliases=("mismatch/mismatch_rollout_log_ppl",), differs=(("other", RANKS),)),
    "mismatch_log_ppl_diff": dict(aliases=("mismatch/mismatch_log_ppl_diff",), differs=(("other", RANKS),)),
    "mismatch_log_ppl_abs_diff": dict(aliases=("mismatch/mismatch_log_ppl_abs_diff",), differs=(("other", RANKS),)),
    "mismatch_log_ppl_diff_max": dict(aliases=("mismatch/mismatch_log_ppl_diff_max",)),
    "mismatch_log_ppl_diff_min": dict(aliases=("mismatch/mismatch_log_ppl_diff_min",)),
    "mismatch_ppl_ratio": dict(aliases=("mismatch/mismatch_ppl_ratio",), differs=(("other", RANKS),)),
    "mismatch_logprob_abs_diff": dict(aliases=("mismatch/mismatch_logprob_abs_diff",), differs=(("other", RANKS), ("trl", GEN))),
    "mismatch_logprob_abs_diff_max": dict(differs=(("trl", GEN),)),
    "mismatch_chi2_token": dict(differs=(("verl", RANKS),)),
    "mismatch_chi2_seq": dict(differs=(("verl", RANKS),)),
    "rollout_is_mean": dict(aliases=("mismatch/rollout_is_mean",), differs=(("other", RANKS + "; verl 0.9.1's rollout_corr/rollout_is_mean is the mean of the truncated weights, a different number"),)),
    "rollout_is_std": dict(aliases=("mismatch/rollout_is_std",), differs=(("other", RANKS),)),
    "rollout_is_eff_sample_size": dict(aliases=("mismatch/rollout_is_eff_sample_size",), differs=(("other", RANKS),)),
    "rollout_is_ratio_fraction_high": dict(aliases=("mismatch/rollout_is_ratio_fraction_high",), differs=(("other", RANKS),)),
    "rollout_is_ratio_fraction_low": dict(aliases=("mismatch/rollout_is_ratio_fraction_low",), differs=(("other", RANKS),)),
    "rollout_is_veto_fraction": dict(aliases=("mismatch/rollout_is_veto_fraction",), differs=(("other", RANKS),)),
    "rollout_is_catastrophic_token_fraction": dict(aliases=("mismatch/rollout_is_catastrophic_token_fraction",), differs=(("other", RANKS),)),
    "rollout_is_masked_fraction": dict(aliases=("mismatch/rollout_is_masked_fraction",), differs=(("other", RANKS),)),
    "rollout_is_seq_masked_fraction": dict(aliases=("mismatch/rollout_is_seq_masked_fraction",), differs=(("other", RANKS),)),
    "rollout_is_seq_mean": dict(aliases=("mismatch/rollout_is_seq_mean",), differs=(("other", RANKS),)),
    "rollout_is_seq_std": dict(aliases=("mismatch/rollout_is_seq_std",), differs=(("other", RANKS + "; both are the sample std (n - 1) of the per-sequence means"),)),
    "rollout_is_seq_fraction_high": dict(aliases=("mismatch/rollout_is_seq_fraction_high",), differs=(("other", RANKS),)),
    "rollout_is_seq_fraction_low": dict(aliases=("mismatch/rollout_is_seq_fraction_low",), differs=(("other", RANKS),)),
    "loss": dict(maxent=M + "loss", aliases=(M + "loss/total", M + "objective/minimize")),
    "grad_norm": dict(maxent=M + "grad_norm"),
    "learning_rate": dict(maxent=M + "learning_rate", aliases=("lr",)),
    "beta": dict(maxent=M + "beta", aliases=(M + "kl_coeff", M + "weighting/beta"), differs=(("trl", "TRL does not log it: it is GRPOConfig.beta, recorded by the TRL integration"),)),
    "step": dict(maxent=M + "global_step", differs=(("trl", "TRL's log history calls it `step` (state.global_step), which is this signal's key"),)),
    "num_tokens": dict(maxent=M + "num_tokens"),
    # TRL's own definitions, computed by `instrument` from TRL's tensors over the whole logging window
    "trl_kl": dict(differs=(("trl", "TRL logs each micro-batch's mean and averages them over the logging window; `instrument` "
                                    "pools every token of the window (equal with one micro-batch per logged step); through "
                                    "TRL's logs alone (the callback, follow) it is TRL's number"),)),
    "trl_is_ratio_mean": dict(differs=(("trl", GEN),)),
    "trl_is_ratio_min": dict(differs=(("trl", GEN),)),
    "trl_is_ratio_max": dict(differs=(("trl", GEN),)),
    "step_time": dict(differs=(("trl", "TRL sums the time of the training_step calls of one optimizer step (generation included when it runs inside them)"),)),
}


def with_notes(signals: tuple[Signal, ...]) -> tuple[Signal, ...]:
    """`signals` with `NOTES` applied; a note naming no signal is a programming error."""
    missing = set(NOTES) - {s.key for s in signals}
    if missing:
        raise RuntimeError(f"peer notes for keys the catalog lacks: {sorted(missing)}")
    return tuple(replace(s, **NOTES[s.key]) if s.key in NOTES else s for s in signals)
