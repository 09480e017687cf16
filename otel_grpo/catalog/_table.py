"""Every signal otel-grpo knows: the one table instruments, dashboards, alerts and docs derive from.

Definitions follow TRL's GRPO logging docs, verl's rollout-correction (mismatch)
helper and the MaxEnt-GRPO metrics module; where our definition differs from a
peer's (for exactness across ranks), the description says so.
"""

from __future__ import annotations

from ._signal import Group, Kind, Reduction, Signal

G, H, C = Kind.GAUGE, Kind.HISTOGRAM, Kind.COUNTER
R = Reduction

# Histogram buckets, chosen per signal so the interesting range has resolution.
REWARD_BUCKETS = (-2.0, -1.0, -0.5, -0.25, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.5, 2.0, 5.0)
ADVANTAGE_BUCKETS = (-3.0, -2.0, -1.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
LENGTH_BUCKETS = tuple(float(2**i) for i in range(0, 16))  # 1 .. 32768 tokens
# IS ratios live around 1 on a log scale: symmetric in log space, finer near 1.
IS_RATIO_BUCKETS = (0.01, 0.1, 0.25, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0, 1.0101, 1.0526, 1.1111, 1.25, 2.0, 4.0, 10.0, 100.0)
# Per-step KL (one observation per step): the alert thresholds must be bounds here.
STEP_KL_BUCKETS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _g(key, name, unit, desc, red, group, trl=None, verl=None, label=None):
    return Signal(key, name, G, unit, desc, red, group, trl, verl, label)


SIGNALS: tuple[Signal, ...] = (
    # ---- rewards ------------------------------------------------------------------
    _g("reward", "grpo.reward.mean", "{reward}", "Mean total reward over all completions of the step.", R.MEAN, Group.REWARD, "reward", "critic/score/mean"),
    _g("reward_std", "grpo.reward.std", "{reward}", "Standard deviation of the total reward over all completions (before group normalization).", R.STD, Group.REWARD, "reward_std"),
    _g("reward_min", "grpo.reward.min", "{reward}", "Minimum total reward.", R.MIN, Group.REWARD, None, "critic/score/min"),
    _g("reward_max", "grpo.reward.max", "{reward}", "Maximum total reward.", R.MAX, Group.REWARD, None, "critic/score/max"),
    _g("reward_p05", "grpo.reward.p05", "{reward}", "5th percentile of the total reward (from the gathered per-completion rewards).", R.QUANTILE, Group.REWARD),
    _g("reward_p50", "grpo.reward.p50", "{reward}", "Median total reward.", R.QUANTILE, Group.REWARD),
    _g("reward_p95", "grpo.reward.p95", "{reward}", "95th percentile of the total reward.", R.QUANTILE, Group.REWARD),
    _g("reward_group_std", "grpo.reward.group_std", "{reward}", "Mean over groups of the within-group reward standard deviation (the signal GRPO learns from).", R.MEAN, Group.REWARD),
    _g("frac_reward_zero_std", "grpo.reward.frac_zero_std", "{ratio}", "Fraction of prompt groups whose rewards are all equal (zero advantage, no learning signal).", R.MEAN, Group.REWARD, "frac_reward_zero_std"),
    _g("reward_fn_mean", "grpo.reward_fn.mean", "{reward}", "Mean reward of one reward function (attribute `reward_fn`).", R.MEAN, Group.REWARD, "rewards/{reward_fn}/mean", None, "reward_fn"),
    _g("reward_fn_std", "grpo.reward_fn.std", "{reward}", "Standard deviation of one reward function's reward (attribute `reward_fn`).", R.STD, Group.REWARD, "rewards/{reward_fn}/std", None, "reward_fn"),
    # ---- advantages ---------------------------------------------------------------
    _g("advantage_mean", "grpo.advantage.mean", "{advantage}", "Mean advantage over completions.", R.MEAN, Group.ADVANTAGE, None, "critic/advantages/mean"),
    _g("advantage_std", "grpo.advantage.std", "{advantage}", "Standard deviation of the advantage over completions.", R.STD, Group.ADVANTAGE),
    _g("advantage_min", "grpo.advantage.min", "{advantage}", "Minimum advantage.", R.MIN, Group.ADVANTAGE, None, "critic/advantages/min"),
    _g("advantage_max", "grpo.advantage.max", "{advantage}", "Maximum advantage.", R.MAX, Group.ADVANTAGE, None, "critic/advantages/max"),
    # ---- completion lengths -------------------------------------------------------
    _g("completion_length_mean", "grpo.completion.length.mean", "{token}", "Mean completion length over all sampled completions (terminated or not).", R.MEAN, Group.LENGTH, "completions/mean_length", "response_length/mean"),
    _g("completion_length_std", "grpo.completion.length.std", "{token}", "Standard deviation of completion length.", R.STD, Group.LENGTH),
    _g("completion_length_min", "grpo.completion.length.min", "{token}", "Minimum completion length.", R.MIN, Group.LENGTH, "completions/min_length", "response_length/min"),
    _g("completion_length_max", "grpo.completion.length.max", "{token}", "Maximum completion length.", R.MAX, Group.LENGTH, "completions/max_length", "response_length/max"),
    _g("completions_clipped_ratio", "grpo.completion.clipped_ratio", "{ratio}", "Fraction of completions truncated at the maximum length (no EOS).", R.MEAN, Group.LENGTH, "completions/clipped_ratio", "response_length/clip_ratio"),
    _g("terminated_length_mean", "grpo.completion.terminated_length.mean", "{token}", "Mean length of completions that ended with EOS.", R.MEAN, Group.LENGTH, "completions/mean_terminated_length"),
    _g("terminated_length_min", "grpo.completion.terminated_length.min", "{token}", "Minimum length of completions that ended with EOS.", R.MIN, Group.LENGTH, "completions/min_terminated_length"),
    _g("terminated_length_max", "grpo.completion.terminated_length.max", "{token}", "Maximum length of completions that ended with EOS.", R.MAX, Group.LENGTH, "completions/max_terminated_length"),
    _g("distinct_1", "grpo.completion.distinct_1", "{ratio}", "Distinct unigrams / total unigrams over the step's completions (diversity).", R.DERIVED, Group.LENGTH),
    _g("distinct_2", "grpo.completion.distinct_2", "{ratio}", "Distinct bigrams / total bigrams over the step's completions (diversity).", R.DERIVED, Group.LENGTH),
    # ---- policy / clipping --------------------------------------------------------
    _g("clip_ratio_low_mean", "grpo.clip_ratio.low", "{ratio}", "Token fraction with ratio < 1 - epsilon_low where the advantage is negative (TRL's definition).", R.MEAN, Group.POLICY, "clip_ratio/low_mean", "actor/pg_clipfrac_lower"),
    _g("clip_ratio_low_min", "grpo.clip_ratio.low_min", "{ratio}", "Minimum over sequences of the per-sequence low clip fraction (TRL takes the minimum over processes; ours does not depend on how the batch is split).", R.MIN, Group.POLICY, "clip_ratio/low_min"),
    _g("clip_ratio_high_mean", "grpo.clip_ratio.high", "{ratio}", "Token fraction with ratio > 1 + epsilon_high where the advantage is positive.", R.MEAN, Group.POLICY, "clip_ratio/high_mean"),
    _g("clip_ratio_high_max", "grpo.clip_ratio.high_max", "{ratio}", "Maximum over sequences of the per-sequence high clip fraction (TRL: maximum over processes).", R.MAX, Group.POLICY, "clip_ratio/high_max"),
    _g("clip_ratio_region_mean", "grpo.clip_ratio.region", "{ratio}", "Token fraction clipped at either bound (low or high).", R.MEAN, Group.POLICY, "clip_ratio/region_mean", "actor/pg_clipfrac"),
    _g("policy_ratio_mean", "grpo.policy.ratio.mean", "{ratio}", "Mean token probability ratio pi_theta / pi_old.", R.MEAN, Group.POLICY, None, None),
    _g("policy_ratio_max", "grpo.policy.ratio.max", "{ratio}", "Maximum token probability ratio pi_theta / pi_old.", R.MAX, Group.POLICY),
    _g("policy_ratio_min", "grpo.policy.ratio.min", "{ratio}", "Minimum token probability ratio pi_theta / pi_old.", R.MIN, Group.POLICY),
    _g("approx_kl", "grpo.policy.approx_kl", "{nat}", "Approximate KL between old and current policy, mean over tokens of 0.5 * (log ratio)^2.", R.MEAN, Group.POLICY, None, "actor/ppo_kl"),
    _g("entropy", "grpo.policy.entropy", "{nat}", "Mean per-token entropy of the current policy over completion tokens.", R.MEAN, Group.POLICY, "entropy", "actor/entropy"),
    # ---- KL to the reference ------------------------------------------------------
    _g("kl", "grpo.kl", "{nat}", "KL to the reference policy, k3 estimator exp(r) - r - 1 with r = log pi_ref - log pi_theta, mean over completion tokens (TRL's `kl`).", R.MEAN, Group.KL, "kl", "actor/kl_loss"),
    _g("kl_k1", "grpo.kl.k1", "{nat}", "KL to the reference, k1 estimator log pi_theta - log pi_ref, mean over completion tokens.", R.MEAN, Group.KL),
    _g("kl_max", "grpo.kl.max", "{nat}", "Largest per-token k3 KL to the reference.", R.MAX, Group.KL),
    _g("kl_seq_mean", "grpo.kl.per_sequence", "{nat}", "Mean over completions of the summed per-token k3 KL (KL per completion).", R.MEAN, Group.KL),
    # ---- rollout vs training mismatch (always measured when rollout log-probs exist)
    _g("mismatch_kl", "grpo.mismatch.kl", "{nat}", "KL(pi_rollout || pi_train), direct estimator: mean over tokens of log pi_rollout - log pi_train.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_kl"),
    _g("mismatch_k3_kl", "grpo.mismatch.k3_kl", "{nat}", "KL(pi_rollout || pi_train), k3 estimator: mean over tokens of rho - log rho - 1, rho = pi_train / pi_rollout.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_k3_kl"),
    _g("mismatch_training_ppl", "grpo.mismatch.training_ppl", "{ppl}", "Mean over sequences of the training policy's per-sequence perplexity.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_training_ppl"),
    _g("mismatch_training_log_ppl", "grpo.mismatch.training_log_ppl", "{nat}", "Mean over sequences of the training policy's per-sequence log perplexity.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_training_log_ppl"),
    _g("mismatch_rollout_ppl", "grpo.mismatch.rollout_ppl", "{ppl}", "Mean over sequences of the rollout policy's per-sequence perplexity.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_rollout_ppl"),
    _g("mismatch_rollout_log_ppl", "grpo.mismatch.rollout_log_ppl", "{nat}", "Mean over sequences of the rollout policy's per-sequence log perplexity.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_rollout_log_ppl"),
    _g("mismatch_log_ppl_diff", "grpo.mismatch.log_ppl_diff", "{nat}", "Mean over sequences of mean log pi_rollout - mean log pi_train.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_log_ppl_diff"),
    _g("mismatch_log_ppl_abs_diff", "grpo.mismatch.log_ppl_abs_diff", "{nat}", "Mean over sequences of |log ppl difference|.", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_log_ppl_abs_diff"),
    _g("mismatch_log_ppl_diff_max", "grpo.mismatch.log_ppl_diff_max", "{nat}", "Largest per-sequence log ppl difference.", R.MAX, Group.MISMATCH, None, "mismatch/mismatch_log_ppl_diff_max"),
    _g("mismatch_log_ppl_diff_min", "grpo.mismatch.log_ppl_diff_min", "{nat}", "Smallest per-sequence log ppl difference.", R.MIN, Group.MISMATCH, None, "mismatch/mismatch_log_ppl_diff_min"),
    _g("mismatch_ppl_ratio", "grpo.mismatch.ppl_ratio", "{ratio}", "Mean over sequences of training ppl / rollout ppl (= exp(log ppl diff)).", R.MEAN, Group.MISMATCH, None, "mismatch/mismatch_ppl_ratio"),
    _g("mismatch_logprob_abs_diff", "grpo.mismatch.logprob_abs_diff", "{nat}", "Mean over tokens of |log pi_train - log pi_rollout| (TRL's sampling log-prob difference).", R.MEAN, Group.MISMATCH, "sampling/sampling_logp_difference/mean", "mismatch/mismatch_logprob_abs_diff"),
    _g("mismatch_logprob_abs_diff_max", "grpo.mismatch.logprob_abs_diff_max", "{nat}", "Largest per-token |log pi_train - log pi_rollout|.", R.MAX, Group.MISMATCH, "sampling/sampling_logp_difference/max"),
    _g("is_ratio_mean", "grpo.mismatch.is_ratio.mean", "{ratio}", "Mean token IS ratio pi_train / pi_rollout (uncorrected, safety-bounded at exp(+-20)).", R.MEAN, Group.MISMATCH, "sampling/importance_sampling_ratio/mean"),
    _g("is_ratio_min", "grpo.mismatch.is_ratio.min", "{ratio}", "Minimum token IS ratio pi_train / pi_rollout.", R.MIN, Group.MISMATCH, "sampling/importance_sampling_ratio/min"),
    _g("is_ratio_max", "grpo.mismatch.is_ratio.max", "{ratio}", "Maximum token IS ratio pi_train / pi_rollout.", R.MAX, Group.MISMATCH, "sampling/importance_sampling_ratio/max"),
    _g("mismatch_chi2_token", "grpo.mismatch.chi2_token", "{ratio}", "Token-level chi-square divergence estimate: mean over tokens of (rho_t - 1)^2, rho safety-bounded.", R.MEAN, Group.MISMATCH, None, "rollout_corr/chi2_token"),
    _g("mismatch_chi2_seq", "grpo.mismatch.chi2_seq", "{ratio}", "Sequence-level chi-square divergence estimate: mean over sequences of (rho_seq - 1)^2, rho_seq = exp(clamp(sum log rho, +-20)).", R.MEAN, Group.MISMATCH, None, "rollout_corr/chi2_seq"),
    # ---- rollout IS correction (seed 004 semantics; computed when correction runs) -
    _g("rollout_is_mean", "grpo.rollout_is.mean", "{ratio}", "Mean IS weight over valid tokens (safety-bounded, before truncation).", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_mean"),
    _g("rollout_is_std", "grpo.rollout_is.std", "{ratio}", "Standard deviation of IS weights clamped to the thresholds.", R.STD, Group.ROLLOUT_IS, None, "mismatch/rollout_is_std"),
    _g("rollout_is_min", "grpo.rollout_is.min", "{ratio}", "Minimum IS weight (sequence/geometric: from unclamped log space).", R.MIN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_min"),
    _g("rollout_is_max", "grpo.rollout_is.max", "{ratio}", "Maximum IS weight (sequence/geometric: from unclamped log space, capped at exp(20)).", R.MAX, Group.ROLLOUT_IS, None, "mismatch/rollout_is_max"),
    _g("rollout_is_eff_sample_size", "grpo.rollout_is.eff_sample_size", "{ratio}", "Effective sample size fraction 1 / mean((w / mean w)^2) with w clamped to the thresholds.", R.DERIVED, Group.ROLLOUT_IS, None, "mismatch/rollout_is_eff_sample_size"),
    _g("rollout_is_ratio_fraction_high", "grpo.rollout_is.fraction_high", "{ratio}", "Fraction of weights above the upper threshold.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_ratio_fraction_high"),
    _g("rollout_is_ratio_fraction_low", "grpo.rollout_is.fraction_low", "{ratio}", "Fraction of weights below the lower threshold.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_ratio_fraction_low"),
    _g("rollout_is_veto_fraction", "grpo.rollout_is.veto_fraction", "{ratio}", "Fraction of valid sequences vetoed for a catastrophic token.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_veto_fraction"),
    _g("rollout_is_catastrophic_token_fraction", "grpo.rollout_is.catastrophic_token_fraction", "{ratio}", "Fraction of valid tokens outside the veto thresholds.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_catastrophic_token_fraction"),
    _g("rollout_is_masked_fraction", "grpo.rollout_is.masked_fraction", "{ratio}", "Fraction of valid tokens rejected by mask mode.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_masked_fraction"),
    _g("rollout_is_seq_masked_fraction", "grpo.rollout_is.seq_masked_fraction", "{ratio}", "Fraction of sequences with at least one token rejected by mask mode.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_masked_fraction"),
    _g("rollout_is_seq_mean", "grpo.rollout_is.seq.mean", "{ratio}", "Mean over valid sequences of the per-sequence mean IS weight.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_mean"),
    _g("rollout_is_seq_std", "grpo.rollout_is.seq.std", "{ratio}", "Sample standard deviation over valid sequences of the per-sequence mean IS weight.", R.STD, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_std"),
    _g("rollout_is_seq_min", "grpo.rollout_is.seq.min", "{ratio}", "Smallest per-sequence mean IS weight.", R.MIN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_min"),
    _g("rollout_is_seq_max", "grpo.rollout_is.seq.max", "{ratio}", "Largest per-sequence mean IS weight.", R.MAX, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_max"),
    _g("rollout_is_seq_max_deviation", "grpo.rollout_is.seq.max_deviation", "{ratio}", "Largest |per-sequence mean IS weight - 1|.", R.MAX, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_max_deviation"),
    _g("rollout_is_seq_fraction_high", "grpo.rollout_is.seq.fraction_high", "{ratio}", "Fraction of valid sequences whose mean IS weight exceeds the upper threshold.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_fraction_high"),
    _g("rollout_is_seq_fraction_low", "grpo.rollout_is.seq.fraction_low", "{ratio}", "Fraction of valid sequences whose mean IS weight is below the lower threshold.", R.MEAN, Group.ROLLOUT_IS, None, "mismatch/rollout_is_seq_fraction_low"),
    # ---- optimisation -------------------------------------------------------------
    _g("loss", "grpo.loss", "{loss}", "Policy loss of the step (mean over optimizer steps).", R.MEAN, Group.OPTIM, "loss", "actor/pg_loss"),
    _g("grad_norm", "grpo.grad_norm", "{norm}", "Global gradient norm before clipping.", R.HOST, Group.OPTIM, "grad_norm", "actor/grad_norm"),
    _g("learning_rate", "grpo.learning_rate", "{lr}", "Learning rate of the optimizer.", R.HOST, Group.OPTIM, "learning_rate", "actor/lr"),
    _g("beta", "grpo.kl_coef", "{coef}", "KL penalty coefficient beta.", R.HOST, Group.OPTIM, "beta", "actor/kl_coef"),
    # ---- throughput and progress --------------------------------------------------
    _g("step", "grpo.step_index", "{step}", "Index of the last completed training step.", R.HOST, Group.THROUGHPUT, "global_step", "training/global_step"),
    _g("num_tokens", "grpo.num_tokens", "{token}", "Tokens processed so far (prompt + completion), cumulative, as TRL's `num_tokens`.", R.HOST, Group.THROUGHPUT, "num_tokens"),
    _g("step_time", "grpo.step_time", "s", "Wall time of the training step.", R.HOST, Group.THROUGHPUT, "step_time", "timing_s/step"),
    _g("tokens_per_second", "grpo.throughput", "{token_per_s}", "Tokens processed per second of step wall time.", R.HOST, Group.THROUGHPUT, None, "perf/throughput"),
    Signal("steps", "grpo.steps", C, "{step}", "Training steps completed (counter; its rate is step progress).", R.HOST, Group.THROUGHPUT),
    Signal("tokens", "grpo.tokens", C, "{token}", "Tokens processed (counter).", R.SUM, Group.THROUGHPUT),
    Signal("samples", "grpo.samples", C, "{sample}", "Completions generated (counter).", R.SUM, Group.THROUGHPUT),
    Signal("phase_duration", "grpo.phase.duration", H, "s", "Duration of a phase of the step (attribute `phase`: rollout, reward, reference, update, ...).", R.HOST, Group.THROUGHPUT, label="phase", buckets=DURATION_BUCKETS),
    # ---- per-sample distributions -------------------------------------------------
    Signal("sample_reward", "grpo.sample.reward", H, "{reward}", "Total reward of each completion.", R.SAMPLES, Group.REWARD, buckets=REWARD_BUCKETS),
    Signal("sample_advantage", "grpo.sample.advantage", H, "{advantage}", "Advantage of each completion.", R.SAMPLES, Group.ADVANTAGE, buckets=ADVANTAGE_BUCKETS),
    Signal("sample_completion_length", "grpo.sample.completion_length", H, "{token}", "Length of each completion in tokens.", R.SAMPLES, Group.LENGTH, buckets=LENGTH_BUCKETS),
    Signal("sample_is_ratio", "grpo.sample.is_ratio", H, "{ratio}", "Per-sequence geometric-mean IS ratio pi_train / pi_rollout of each completion.", R.SAMPLES, Group.MISMATCH, buckets=IS_RATIO_BUCKETS),
    # ---- health -------------------------------------------------------------------
    Signal("nonfinite", "grpo.nonfinite", C, "{value}", "Non-finite (NaN or infinite) values seen and not exported (attribute `signal`: the key).", R.HOST, Group.HEALTH, label="signal"),
    Signal("skipped_steps", "grpo.skipped_steps", C, "{step}", "Steps whose update was skipped (non-finite loss or a failed batch).", R.HOST, Group.HEALTH),
    _g("run_finished", "grpo.run.finished", "{bool}", "1 once the run has ended on purpose: training completed, or the user stopped it (Ctrl-C, SIGTERM). Never set by a crash, so a run whose series stop without it crashed or lost its exporter.", R.HOST, Group.HEALTH),
    # ---- per-step distributions for alerts (issue 15) -------------------------------
    # One observation per training step: the bucket counters count the steps over each
    # bound, so a one-step spike between two scrapes still reaches Prometheus.
    Signal("step_kl", "grpo.step.kl", H, "{nat}", "KL to the reference of each step (`kl`), one observation per step: counts the steps above each bound (GRPOKLSpike).", R.HOST, Group.KL, buckets=STEP_KL_BUCKETS),
)
