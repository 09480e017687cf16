"""Every signal otel-grpo knows: the one table instruments, dashboards, alerts and docs derive from.

Definitions follow TRL's GRPO logging docs, verl's rollout-correction (mismatch)
helper and the MaxEnt-GRPO metrics module; where our definition differs from a
peer's (for exactness across ranks), the description says so.
"""

from __future__ import annotations

from ._peers import seed_signals, with_notes
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


def _g(key, name, unit, desc, red, group, trl=None, verl=None, label=None, **more):
    return Signal(key, name, G, unit, desc, red, group, trl, verl, label, **more)


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
    _g("advantage_mean", "grpo.advantage.mean", "{advantage}", "Mean advantage over completions (each completion counts once; verl's token-weighted mean is `advantage_token_mean`).", R.MEAN, Group.ADVANTAGE),
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
    _g("clip_ratio_low_mean", "grpo.clip_ratio.low", "{ratio}", "Token fraction with ratio < 1 - epsilon_low where the advantage is negative (TRL's definition; verl's `actor/pg_clipfrac_lower` is the dual-clip fraction, `dual_clip_fraction`).", R.MEAN, Group.POLICY, "clip_ratio/low_mean"),
    _g("clip_ratio_low_min", "grpo.clip_ratio.low_min", "{ratio}", "Minimum over sequences of every rank of the per-sequence low clip fraction (token fraction with ratio < 1 - epsilon_low and negative advantage; sequences without tokens skipped). TRL 1.16 computes exactly this per micro-batch (nanmin of the gathered per-sequence fractions).", R.MIN, Group.POLICY, "clip_ratio/low_min"),
    _g("clip_ratio_high_mean", "grpo.clip_ratio.high", "{ratio}", "Token fraction with ratio > 1 + epsilon_high where the advantage is positive.", R.MEAN, Group.POLICY, "clip_ratio/high_mean"),
    _g("clip_ratio_high_max", "grpo.clip_ratio.high_max", "{ratio}", "Maximum over sequences of every rank of the per-sequence high clip fraction (token fraction with ratio > 1 + epsilon_high and positive advantage). TRL 1.16 computes exactly this per micro-batch (nanmax of the gathered per-sequence fractions).", R.MAX, Group.POLICY, "clip_ratio/high_max"),
    _g("clip_ratio_region_mean", "grpo.clip_ratio.region", "{ratio}", "Token fraction clipped at either bound (low or high).", R.MEAN, Group.POLICY, "clip_ratio/region_mean", "actor/pg_clipfrac"),
    _g("policy_ratio_mean", "grpo.policy.ratio.mean", "{ratio}", "Mean token probability ratio pi_theta / pi_old.", R.MEAN, Group.POLICY, None, None),
    _g("policy_ratio_max", "grpo.policy.ratio.max", "{ratio}", "Maximum token probability ratio pi_theta / pi_old.", R.MAX, Group.POLICY),
    _g("policy_ratio_min", "grpo.policy.ratio.min", "{ratio}", "Minimum token probability ratio pi_theta / pi_old.", R.MIN, Group.POLICY),
    _g("approx_kl", "grpo.policy.approx_kl", "{nat}", "Approximate KL between old and current policy, k2: mean over tokens of 0.5 * (log pi_theta - log pi_old)^2 (verl's `actor/ppo_kl` is k1: `ppo_kl`).", R.MEAN, Group.POLICY),
    _g("entropy", "grpo.policy.entropy", "{nat}", "Mean per-token entropy of the current policy over completion tokens.", R.MEAN, Group.POLICY, "entropy", "actor/entropy"),
    # ---- KL to the reference ------------------------------------------------------
    _g("kl", "grpo.kl", "{nat}", "KL to the reference policy, k3 estimator exp(r) - r - 1 with r = log pi_ref - log pi_theta, mean over completion tokens (plain k3 in every trainer; TRL's bias-corrected `kl` is grpo.trl.kl).", R.MEAN, Group.KL, None, "actor/kl_loss"),
    _g("kl_k1", "grpo.kl.k1", "{nat}", "KL to the reference, k1 estimator log pi_theta - log pi_ref, mean over completion tokens.", R.MEAN, Group.KL),
    _g("kl_max", "grpo.kl.max", "{nat}", "Largest per-token k3 KL to the reference.", R.MAX, Group.KL),
    _g("kl_seq_mean", "grpo.kl.per_sequence", "{nat}", "Mean over completions of the summed per-token k3 KL (KL per completion).", R.MEAN, Group.KL),
    # ---- rollout vs training mismatch (always measured when rollout log-probs exist)
    _g("mismatch_kl", "grpo.mismatch.kl", "{nat}", "KL(pi_rollout || pi_train), direct estimator: mean over tokens of log pi_rollout - log pi_train.", R.MEAN, Group.MISMATCH, None, "rollout_corr/kl"),
    _g("mismatch_k3_kl", "grpo.mismatch.k3_kl", "{nat}", "KL(pi_rollout || pi_train), k3 estimator: mean over tokens of rho - log rho - 1, rho = pi_train / pi_rollout.", R.MEAN, Group.MISMATCH, None, "rollout_corr/k3_kl"),
    _g("mismatch_training_ppl", "grpo.mismatch.training_ppl", "{ppl}", "Mean over sequences of the training policy's per-sequence perplexity.", R.MEAN, Group.MISMATCH, None, "rollout_corr/training_ppl"),
    _g("mismatch_training_log_ppl", "grpo.mismatch.training_log_ppl", "{nat}", "Mean over sequences of the training policy's per-sequence log perplexity.", R.MEAN, Group.MISMATCH, None, "rollout_corr/training_log_ppl"),
    _g("mismatch_rollout_ppl", "grpo.mismatch.rollout_ppl", "{ppl}", "Mean over sequences of the rollout policy's per-sequence perplexity.", R.MEAN, Group.MISMATCH, None, "rollout_corr/rollout_ppl"),
    _g("mismatch_rollout_log_ppl", "grpo.mismatch.rollout_log_ppl", "{nat}", "Mean over sequences of the rollout policy's per-sequence log perplexity.", R.MEAN, Group.MISMATCH, None, "rollout_corr/rollout_log_ppl"),
    _g("mismatch_log_ppl_diff", "grpo.mismatch.log_ppl_diff", "{nat}", "Mean over sequences of mean log pi_rollout - mean log pi_train.", R.MEAN, Group.MISMATCH, None, "rollout_corr/log_ppl_diff"),
    _g("mismatch_log_ppl_abs_diff", "grpo.mismatch.log_ppl_abs_diff", "{nat}", "Mean over sequences of |log ppl difference|.", R.MEAN, Group.MISMATCH, None, "rollout_corr/log_ppl_abs_diff"),
    _g("mismatch_log_ppl_diff_max", "grpo.mismatch.log_ppl_diff_max", "{nat}", "Largest per-sequence log ppl difference.", R.MAX, Group.MISMATCH, None, "rollout_corr/log_ppl_diff_max"),
    _g("mismatch_log_ppl_diff_min", "grpo.mismatch.log_ppl_diff_min", "{nat}", "Smallest per-sequence log ppl difference.", R.MIN, Group.MISMATCH, None, "rollout_corr/log_ppl_diff_min"),
    _g("mismatch_ppl_ratio", "grpo.mismatch.ppl_ratio", "{ratio}", "Mean over sequences of training ppl / rollout ppl (= exp(log ppl diff)).", R.MEAN, Group.MISMATCH, None, "rollout_corr/ppl_ratio"),
    _g("mismatch_logprob_abs_diff", "grpo.mismatch.logprob_abs_diff", "{nat}", "Mean over tokens of |log pi_train - log pi_rollout| (TRL's sampling log-prob difference).", R.MEAN, Group.MISMATCH, "sampling/sampling_logp_difference/mean", None),
    _g("mismatch_logprob_abs_diff_max", "grpo.mismatch.logprob_abs_diff_max", "{nat}", "Largest per-token |log pi_train - log pi_rollout|.", R.MAX, Group.MISMATCH, "sampling/sampling_logp_difference/max"),
    _g("is_ratio_mean", "grpo.mismatch.is_ratio.mean", "{ratio}", "Mean token IS ratio pi_train / pi_rollout (uncorrected, safety-bounded at exp(+-20)).", R.MEAN, Group.MISMATCH),
    _g("is_ratio_min", "grpo.mismatch.is_ratio.min", "{ratio}", "Minimum token IS ratio pi_train / pi_rollout.", R.MIN, Group.MISMATCH),
    _g("is_ratio_max", "grpo.mismatch.is_ratio.max", "{ratio}", "Maximum token IS ratio pi_train / pi_rollout.", R.MAX, Group.MISMATCH),
    _g("mismatch_chi2_token", "grpo.mismatch.chi2_token", "{ratio}", "Token-level chi-square divergence chi2(pi_train || pi_rollout) = E[rho_t^2] - 1: mean over tokens of rho_t^2, minus 1; rho_t = exp(clamp(log pi_train - log pi_rollout, +-20)) (verl 0.9.1's rollout_corr/chi2_token).", R.MEAN, Group.MISMATCH, None, "rollout_corr/chi2_token"),
    _g("mismatch_chi2_seq", "grpo.mismatch.chi2_seq", "{ratio}", "Sequence-level chi-square divergence E[rho_seq^2] - 1: mean over all rows of exp(2 * clamp(sum of token log ratios, +-20)), minus 1 (a row without tokens adds 0; verl 0.9.1's rollout_corr/chi2_seq).", R.MEAN, Group.MISMATCH, None, "rollout_corr/chi2_seq"),
    # ---- rollout IS correction (seed 004 semantics; computed when correction runs) -
    _g("rollout_is_mean", "grpo.rollout_is.mean", "{ratio}", "Mean IS weight over valid tokens (safety-bounded, before truncation).", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_std", "grpo.rollout_is.std", "{ratio}", "Standard deviation of IS weights clamped to the thresholds.", R.STD, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_min", "grpo.rollout_is.min", "{ratio}", "Minimum IS weight (sequence/geometric: from unclamped log space).", R.MIN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_max", "grpo.rollout_is.max", "{ratio}", "Maximum IS weight (sequence/geometric: from unclamped log space, capped at exp(20)).", R.MAX, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_eff_sample_size", "grpo.rollout_is.eff_sample_size", "{ratio}", "Effective sample size fraction 1 / mean((w / mean w)^2) with w clamped to the thresholds.", R.DERIVED, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_ratio_fraction_high", "grpo.rollout_is.fraction_high", "{ratio}", "Fraction of weights above the upper threshold.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_ratio_fraction_low", "grpo.rollout_is.fraction_low", "{ratio}", "Fraction of weights below the lower threshold.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_veto_fraction", "grpo.rollout_is.veto_fraction", "{ratio}", "Fraction of valid sequences vetoed for a catastrophic token.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_catastrophic_token_fraction", "grpo.rollout_is.catastrophic_token_fraction", "{ratio}", "Fraction of valid tokens outside the veto thresholds.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_masked_fraction", "grpo.rollout_is.masked_fraction", "{ratio}", "Fraction of valid tokens rejected by mask mode.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_masked_fraction", "grpo.rollout_is.seq_masked_fraction", "{ratio}", "Fraction of sequences with at least one token rejected by mask mode.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_mean", "grpo.rollout_is.seq.mean", "{ratio}", "Mean over valid sequences of the per-sequence mean IS weight.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_std", "grpo.rollout_is.seq.std", "{ratio}", "Sample standard deviation over valid sequences of the per-sequence mean IS weight.", R.STD, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_min", "grpo.rollout_is.seq.min", "{ratio}", "Smallest per-sequence mean IS weight.", R.MIN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_max", "grpo.rollout_is.seq.max", "{ratio}", "Largest per-sequence mean IS weight.", R.MAX, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_max_deviation", "grpo.rollout_is.seq.max_deviation", "{ratio}", "Largest |per-sequence mean IS weight - 1|.", R.MAX, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_fraction_high", "grpo.rollout_is.seq.fraction_high", "{ratio}", "Fraction of valid sequences whose mean IS weight exceeds the upper threshold.", R.MEAN, Group.ROLLOUT_IS, None, None),
    _g("rollout_is_seq_fraction_low", "grpo.rollout_is.seq.fraction_low", "{ratio}", "Fraction of valid sequences whose mean IS weight is below the lower threshold.", R.MEAN, Group.ROLLOUT_IS, None, None),
    # ---- optimisation -------------------------------------------------------------
    _g("loss", "grpo.loss", "{loss}", "Total training loss of the step, the value backpropagated (policy term + beta * KL - entropy bonus), mean over micro-batches; its parts are `loss_policy`, `loss_kl`, `loss_entropy` (verl's `actor/loss`: the same sum, pg_loss - entropy_coeff * entropy + kl_loss_coef * kl).", R.MEAN, Group.OPTIM, "loss", "actor/loss"),
    _g("grad_norm", "grpo.grad_norm", "{norm}", "Global gradient norm before clipping.", R.HOST, Group.OPTIM, "grad_norm", "actor/grad_norm"),
    _g("learning_rate", "grpo.learning_rate", "{lr}", "Learning rate of the optimizer.", R.HOST, Group.OPTIM, "learning_rate", "actor/lr"),
    _g("beta", "grpo.kl_coef", "{coef}", "KL penalty coefficient beta.", R.HOST, Group.OPTIM, "beta", "actor/kl_coef"),
    # ---- throughput and progress --------------------------------------------------
    _g("step", "grpo.step_index", "{step}", "Index of the last completed training step.", R.HOST, Group.THROUGHPUT, "global_step", "training/global_step"),
    _g("num_tokens", "grpo.num_tokens", "{token}", "Tokens processed so far (prompt + completion), cumulative, as TRL's `num_tokens`.", R.HOST, Group.THROUGHPUT, "num_tokens"),
    _g("step_time", "grpo.step_time", "s", "Wall time of the training step.", R.HOST, Group.THROUGHPUT, "step_time", "timing_s/step"),
    _g("log_interval", "grpo.log_interval", "s", "Wall time between the process's last two reported steps (new latest steps of its latest attempt: a further or late record of a step, or one sent again, measures none), counted from the later of the previous step's end and the last heartbeat (an evaluation or a save that beats is work, not part of the interval): `logging_steps` steps when a trainer reports every N. At a process's first step, and at a newer attempt's (`Telemetry.new_attempt`), that step's own duration (the start-up or the resume before it is no step interval), unless the step gives its own (`instrument` and `OtelGrpoCallback` report the first optimizer step at once, with its duration times `logging_steps`: the time to the first log); the stall alert waits 3 times the longest interval of the run's latest process within `recent_window` for the next progress (a first step's warm-up counts only that long).", R.HOST, Group.THROUGHPUT),
    _g("tokens_per_second", "grpo.throughput", "{token_per_s}", "Tokens processed per second of step wall time, all ranks together (verl's per-GPU `perf/throughput` is `tokens_per_second_per_gpu`).", R.HOST, Group.THROUGHPUT),
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
    Signal("nonfinite", "grpo.nonfinite", C, "{value}", "Non-finite (NaN or infinite) values seen and not exported (attribute `signal`: the key; `process`: the counting process, so a resumed run counts in new series).", R.HOST, Group.HEALTH, label="signal"),
    Signal("skipped_steps", "grpo.skipped_steps", C, "{step}", "Steps whose update was skipped (non-finite loss or a failed batch); attribute `process`: the counting process.", R.HOST, Group.HEALTH),
    _g("run_finished", "grpo.run.finished", "{bool}", "1 once the run has ended on purpose: training completed, or the user stopped it (Ctrl-C); 0 from each process's start on (a resumed or relaunched run, even one reusing a finished run's id, is running again). Never set by a crash or a preemption, so a run whose series stop without it crashed, was preempted or lost its exporter.", R.HOST, Group.HEALTH),
    _g("process_start", "grpo.process.start_time", "s", "Unix time at which the exporting process's telemetry started, exported from then on, before any step (as `process`): tells a run that hangs or dies before its first step, and a resumed process from the one before it.", R.HOST, Group.HEALTH),
    _g("activity", "grpo.process.activity_time", "s", "Unix time of the process's last work between training steps (`Telemetry.heartbeat()`: `instrument` and `OtelGrpoCallback` beat per evaluation batch and per change on disk during a checkpoint save, `otel-grpo follow` per change in the job's checkpoint folder), exported from the first heartbeat on: the stall alerts count from the later of it and the last step, so a long evaluation or save is no hang while one stuck in a batch or on a hung file system is.", R.HOST, Group.HEALTH),
    _g("step_end", "grpo.step.end_time", "s", "Unix time at which the process's last reported step ended (the trainer's clock): the stall alerts measure a hang from the later of it, the last heartbeat and the process's start, exactly, whatever the scrape and export intervals; a value older than the process's start is an earlier process's, so the process has no step yet.", R.HOST, Group.HEALTH),
    _g("alive", "grpo.process.alive_until", "s", "Unix time until which the exporting process vouches for itself: at each collection the time plus the metric export interval (a push reader, OTLP) or the time alone (a Prometheus scrape, and the last export of a process that closes). It freezes when the process dies, whatever a collector keeps serving until its metric_expiration: GRPOMetricsAbsent fires once the run's latest promise is overdue by the scrape slack, not when series disappear.", R.HOST, Group.HEALTH),
    _g("clock", "grpo.process.clock", "s", "Unix time on the exporting process's clock at each collection (an export, or a scrape of the pull endpoint). Prometheus stamps every sample with its own scrape time, so the smallest difference between that time and this value over `clock_window` is the process's clock offset (plus the shortest delivery lag): the liveness and hang alerts move every time the process exports (its start, its last step's end and heartbeat, its promise) onto Prometheus's clock by it, so a trainer clock minutes off neither pages a healthy run nor delays a page.", R.HOST, Group.HEALTH),
    _g("run_preempted", "grpo.run.preempted", "{bool}", "1 once the run was stopped by SIGTERM (a scheduler's preemption: to be resumed), 0 from each process's start on.", R.HOST, Group.HEALTH),
    # ---- per-step distributions for alerts (issue 15) -------------------------------
    # One observation per training step: the bucket counters count the steps over each
    # bound, so a one-step spike between two scrapes still reaches Prometheus.
    Signal("step_kl", "grpo.step.kl", H, "{nat}", "KL to the reference of each step as the `kl` step check judges it (`kl`, else TRL's `trl_kl`), one observation per step: counts the steps above each bound (dashboards).", R.HOST, Group.KL, buckets=STEP_KL_BUCKETS),
    # Step checks (catalog/_step_checks.py): the streaks the alerts count steps with.
    _g("step_streak", "grpo.step.streak", "{step}", "Consecutive steps of the latest attempt (a resume in the process starts it again), up to the last one, each counted once (a further or late record of a step advances none), whose step check (attribute `signal`: a scalar, or a trend such as `kl_jump` judged against the run's own recent steps) was beyond `bound` (above it; below it for an effective sample size, entropy or throughput); 0 after a step within the bound.", R.HOST, Group.HEALTH, attributes=("signal", "bound")),
    Signal("step_beyond", "grpo.step.beyond", C, "{step}", "Steps at which the step check `signal` had been beyond `bound` for at least `streak` consecutive steps, that step included (`streak` 1: every step beyond); attribute `process`: the counting process (a resumed run counts in new series). Lossless between scrapes: the alerts' step evidence.", R.HOST, Group.HEALTH, attributes=("signal", "bound", "streak", "process")),
)

# ---- TRL ----------------------------------------------------------------------------
_TRL_SIGNALS = (
    # ---- TRL: what TRL's GRPOTrainer / transformers' Trainer log under their own definitions
    _g("trl_kl", "grpo.trl.kl", "{nat}", "TRL's logged `kl`: mean over completion tokens of the k3 KL to the reference multiplied by the policy ratio pi_theta / pi_old (`use_bias_correction_kl`, TRL's default; plain k3 without it); close to k3 on-policy (ratio 1). grpo.kl is always plain k3. At a step without grpo.kl (TRL integrated through its logs alone) the `kl` step check judges this value, so the KL alerts fire on it.", R.MEAN, Group.KL, "kl"),
    _g("trl_is_ratio_mean", "grpo.trl.is_ratio.mean", "{ratio}", "TRL's vLLM importance-sampling ratio after its correction: exp(log pi_old - log pi_sampling) per token (per sequence, summed, in `sequence_*` modes), clamped to [clip_min, clip_max] (`*_truncate`) or set to 0 outside it (`*_mask`); mean over completion tokens (sequences). The raw ratio is grpo.mismatch.is_ratio.", R.MEAN, Group.MISMATCH, "sampling/importance_sampling_ratio/mean"),
    _g("trl_is_ratio_min", "grpo.trl.is_ratio.min", "{ratio}", "Minimum of TRL's corrected vLLM importance-sampling ratio (see grpo.trl.is_ratio.mean).", R.MIN, Group.MISMATCH, "sampling/importance_sampling_ratio/min"),
    _g("trl_is_ratio_max", "grpo.trl.is_ratio.max", "{ratio}", "Maximum of TRL's corrected vLLM importance-sampling ratio (see grpo.trl.is_ratio.mean).", R.MAX, Group.MISMATCH, "sampling/importance_sampling_ratio/max"),
    _g("policy_loss", "grpo.policy_loss", "{loss}", "TRL's `policy_loss`: the loss before the entropy bonus (logged only when the entropy bonus is on), mean over micro-batches and ranks.", R.MEAN, Group.OPTIM, "policy_loss"),
    _g("entropy_coef", "grpo.entropy_coef", "{coef}", "TRL's entropy-bonus coefficient (`entropy_coef`; adaptive when `use_adaptive_entropy`).", R.HOST, Group.OPTIM, "entropy_coef"),
    _g("aux_loss", "grpo.aux_loss", "{loss}", "TRL's MoE router load-balancing loss (`aux_loss`), mean over micro-batches.", R.HOST, Group.OPTIM, "aux_loss"),
    _g("trl_cispo_clip_ratio", "grpo.trl.cispo_clip_ratio", "{ratio}", "TRL's `cispo_clip_ratio` (loss_type cispo): token fraction with ratio > epsilon_high where the advantage is positive.", R.HOST, Group.POLICY, "cispo_clip_ratio"),
    _g("trl_vespo_phi_seq_mean", "grpo.trl.vespo_phi_seq", "{ratio}", "TRL's `vespo/phi_seq_mean` (loss_type vespo): mean over tokens of the sequence gamma weight.", R.HOST, Group.POLICY, "vespo/phi_seq_mean"),
    _g("tools_call_frequency", "grpo.tools.call_frequency", "{ratio}", "TRL's `tools/call_frequency`: tool calls per completion.", R.HOST, Group.LENGTH, "tools/call_frequency"),
    _g("tools_failure_frequency", "grpo.tools.failure_frequency", "{ratio}", "TRL's `tools/failure_frequency`: failed tool calls per tool call.", R.HOST, Group.LENGTH, "tools/failure_frequency"),
    _g("epoch", "grpo.epoch", "{epoch}", "Training progress in epochs (transformers' `epoch`, fractional; verl's `training/epoch` counts whole epochs).", R.HOST, Group.THROUGHPUT, "epoch", "training/epoch"),
    _g("num_input_tokens_seen", "grpo.num_input_tokens_seen", "{token}", "transformers' `num_input_tokens_seen` (with `include_num_input_tokens_seen`), cumulative.", R.HOST, Group.THROUGHPUT, "num_input_tokens_seen"),
    _g("train_tokens_per_second", "grpo.train.tokens_per_second", "{token_per_s}", "transformers' `train_tokens_per_second`: input tokens of this session per second of training.", R.HOST, Group.THROUGHPUT, "train_tokens_per_second"),
    _g("train_runtime", "grpo.train.runtime", "s", "Wall time of `train()`: transformers' `train_runtime`, in its end-of-training summary (and at every logged step so far with `include_num_input_tokens_seen`).", R.HOST, Group.THROUGHPUT, "train_runtime"),
    _g("train_samples_per_second", "grpo.train.samples_per_second", "{sample_per_s}", "End-of-training summary: training samples per second (transformers' `train_samples_per_second`).", R.HOST, Group.THROUGHPUT, "train_samples_per_second"),
    _g("train_steps_per_second", "grpo.train.steps_per_second", "{step_per_s}", "End-of-training summary: optimizer steps per second (transformers' `train_steps_per_second`).", R.HOST, Group.THROUGHPUT, "train_steps_per_second"),
    _g("total_flos", "grpo.train.total_flos", "{flop}", "End-of-training summary: floating-point operations of the run as transformers estimates them (`total_flos`).", R.HOST, Group.THROUGHPUT, "total_flos"),
    _g("train_loss", "grpo.train.loss", "{loss}", "End-of-training summary: mean training loss over the run (transformers' `train_loss`).", R.HOST, Group.OPTIM, "train_loss"),
    _g("trl_logged", "grpo.trl.logged", "{value}", "Every number a TRL GRPOTrainer (or another transformers Trainer) logged at a training step, exactly as logged, its key in attribute `metric` (`clip_ratio/high_max`, `rewards/<function>/mean`, `kl`, `loss`, ...): the value `trainer.state.log_history` holds and W&B (as `train/<key>`), TensorBoard and MLflow show. TRL averages per-micro-batch values over the logging window, so with gradient accumulation or `logging_steps` > 1 its number differs from the grpo.* series of the same key, which `instrument` computes exactly over every token of the window: this series is TRL's number, that one ours. A key the step did not log, or logged as None or non-finite, has no data point (not counted in grpo.nonfinite: the grpo.* series counts it); TRL's 0.0 for the terminated lengths of a step without a terminated completion is exported as logged. No step check judges it (the KL alerts read grpo.kl, else grpo.trl.kl). Evaluation keys are grpo.eval, also as logged.", R.HOST, Group.TRL_LOGGED, None, None, "metric"),
    _g("eval_metric", "grpo.eval", "{value}", "An evaluation metric: transformers' `eval_<name>` keys, verl's validation metrics (`val-core/<data source>/<var>/<metric>`, `val-aux/...`: the name after `val-`, e.g. `core/openai/gsm8k/reward/mean@4`, so verl's core and auxiliary sections stay apart) and any training statistic an evaluation's record logs (`log_metrics(..., evaluation=True)`: its `reward` is `eval_reward`), the name (TRL's, e.g. `reward`, `loss`, `rewards/acc/mean`) in attribute `metric`.", R.HOST, Group.OPTIM, "eval_{metric}", "val-{metric}", "metric"),
)
SIGNALS += _TRL_SIGNALS

# Gauges whose value is the exporting process's state, not a statistic of one step: they keep their
# value until set again. Every other gauge is a per-step statistic: a step that has no value for it
# (invalid there, not logged, TRL's None) leaves it without a data point (telemetry `_gauges`).
STATE_GAUGES: frozenset[str] = frozenset({
    "step", "log_interval", "step_end", "run_finished", "run_preempted", "process_start", "activity", "alive",
    "clock", "step_streak",
})
TRAINER_STATE: frozenset[str] = STATE_GAUGES | frozenset({
    "epoch", "num_tokens", "num_input_tokens_seen", "learning_rate", "beta", "entropy_coef", "kl_in_reward_coef",
})
"""Signals whose value is the trainer's state when it logs (its progress, its schedule), not a statistic of a batch:
the state gauges, and what a trainer logs beside any metrics (transformers puts `epoch`, and
`num_input_tokens_seen` where counted, into its evaluation logs too). An evaluation's value of one is that state,
on the signal's own gauge; an evaluation's value of any other signal is the evaluation's (`evaluation_key`)."""
TRL_ONLY: frozenset[str] = frozenset(s.key for s in _TRL_SIGNALS)
"""Keys only a TRL (or transformers) Trainer logs, under its own definitions (`otel_grpo.integrations.trl`)."""

# ---- verl 0.9.1 (`otel-grpo follow`) ------------------------------------------------
# What verl 0.9.1 logs that no entry above holds, taken from its source: metric_utils.py
# (compute_data_metrics, compute_throughout_metrics), ray_trainer.py (apply_kl_penalty,
# the engine worker's `loss`/`mfu` renames), workers/utils/losses.py, engine_workers.py.
_VERL_SIGNALS = (
    _g("prompt_length_mean", "grpo.prompt.length.mean", "{token}", "Mean prompt length in tokens (verl: prompt_length/mean, over the step's batch).", R.MEAN, Group.LENGTH, None, "prompt_length/mean"),
    _g("prompt_length_min", "grpo.prompt.length.min", "{token}", "Minimum prompt length in tokens.", R.MIN, Group.LENGTH, None, "prompt_length/min"),
    _g("prompt_length_max", "grpo.prompt.length.max", "{token}", "Maximum prompt length in tokens.", R.MAX, Group.LENGTH, None, "prompt_length/max"),
    _g("prompt_clipped_ratio", "grpo.prompt.clipped_ratio", "{ratio}", "Fraction of prompts exactly at the maximum prompt length (verl: prompt_length/clip_ratio; likely truncated).", R.MEAN, Group.LENGTH, None, "prompt_length/clip_ratio"),
    _g("reward_penalized_mean", "grpo.reward.penalized.mean", "{reward}", "Mean over sequences of the summed token-level reward after the in-reward KL penalty (verl: critic/rewards/mean); equals the score unless verl's algorithm.use_kl_in_reward is on.", R.MEAN, Group.REWARD, None, "critic/rewards/mean"),
    _g("reward_penalized_min", "grpo.reward.penalized.min", "{reward}", "Minimum per-sequence reward after the in-reward KL penalty (verl: critic/rewards/min).", R.MIN, Group.REWARD, None, "critic/rewards/min"),
    _g("reward_penalized_max", "grpo.reward.penalized.max", "{reward}", "Maximum per-sequence reward after the in-reward KL penalty (verl: critic/rewards/max).", R.MAX, Group.REWARD, None, "critic/rewards/max"),
    _g("return_mean", "grpo.return.mean", "{advantage}", "Mean over response tokens of the return (verl: critic/returns/mean; for GRPO's outcome advantage the return equals the advantage).", R.MEAN, Group.ADVANTAGE, None, "critic/returns/mean"),
    _g("return_min", "grpo.return.min", "{advantage}", "Minimum token return (verl: critic/returns/min).", R.MIN, Group.ADVANTAGE, None, "critic/returns/min"),
    _g("return_max", "grpo.return.max", "{advantage}", "Maximum token return (verl: critic/returns/max).", R.MAX, Group.ADVANTAGE, None, "critic/returns/max"),
    _g("kl_in_reward", "grpo.kl.in_reward", "{nat}", "KL to the reference subtracted from the reward (verl: actor/reward_kl_penalty, with algorithm.use_kl_in_reward): batch mean of the per-sequence token-mean KL.", R.MEAN, Group.KL, None, "actor/reward_kl_penalty"),
    _g("kl_in_reward_coef", "grpo.kl_in_reward_coef", "{coef}", "Coefficient of the in-reward KL penalty (verl: actor/reward_kl_penalty_coeff; adaptive or fixed controller).", R.HOST, Group.OPTIM, None, "actor/reward_kl_penalty_coeff"),
    _g("entropy_loss", "grpo.policy.entropy_loss", "{nat}", "Policy entropy aggregated as the loss is (verl: actor/entropy_loss, by its loss_agg_mode), before entropy_coeff.", R.MEAN, Group.POLICY, None, "actor/entropy_loss"),
    _g("mfu", "grpo.mfu", "{ratio}", "Model FLOPs utilization of one role (attribute `role`: actor, critic, actor_infer; verl: perf/mfu/<role>).", R.HOST, Group.THROUGHPUT, None, "perf/mfu/{role}", "role"),
    _g("device_memory_allocated_max", "grpo.memory.device_allocated_max", "{gibibyte}", "Peak accelerator memory allocated by the training worker, GiB (verl: perf/max_memory_allocated_gb).", R.HOST, Group.THROUGHPUT, None, "perf/max_memory_allocated_gb"),
    _g("device_memory_reserved_max", "grpo.memory.device_reserved_max", "{gibibyte}", "Peak accelerator memory reserved by the allocator, GiB (verl: perf/max_memory_reserved_gb).", R.HOST, Group.THROUGHPUT, None, "perf/max_memory_reserved_gb"),
    _g("host_memory_used", "grpo.memory.host_used", "{gibibyte}", "Host memory in use on the training worker's machine, GiB (verl: perf/cpu_memory_used_gb).", R.HOST, Group.THROUGHPUT, None, "perf/cpu_memory_used_gb"),
    _g("step_tokens", "grpo.step_tokens", "{token}", "Tokens (prompt + response) in the step's batch (verl: perf/total_num_tokens).", R.SUM, Group.THROUGHPUT, None, "perf/total_num_tokens"),
    _g("rollout_is_oob_ratio", "grpo.rollout_is.oob_ratio", "{ratio}", "Fraction of valid tokens whose IS weight falls outside [lower, upper] before truncation (verl: rollout_corr/rollout_is_oob_ratio).", R.MEAN, Group.ROLLOUT_IS, None, "rollout_corr/rollout_is_oob_ratio"),
    _g("rollout_is_batch_norm_factor", "grpo.rollout_is.batch_norm_factor", "{ratio}", "Mean IS weight the batch was divided by when verl normalizes weights per batch (1 when it does not; verl: rollout_corr/rollout_is_batch_norm_factor).", R.MEAN, Group.ROLLOUT_IS, None, "rollout_corr/rollout_is_batch_norm_factor"),
)
SIGNALS += _VERL_SIGNALS

# ---- issue 14: signals the seeds name, peers' names and differences (see _peers) ----
SIGNALS = with_notes(SIGNALS + seed_signals(REWARD_BUCKETS))
FOLLOW_ONLY: frozenset[str] = frozenset(s.key for s in _VERL_SIGNALS)
"""Keys only verl's own files carry (via `otel-grpo follow`): the demo trainer computes none of them."""

# verl 0.9.1 names for entries above whose `verl` field holds another name: the mismatch set
# moved to `rollout_corr/` (rollout_corr_helper.py adds the prefix), and `perf/time_per_step`
# repeats `timing_s/step`. A signal's own aliases win over these.
VERL_ALIASES: dict[str, str] = {
    "perf/time_per_step": "step_time",
    # The engine worker logs its memory as perf/*; ray_trainer's rename_dict prefixes it with the role.
    "actor/perf/max_memory_allocated_gb": "device_memory_allocated_max",
    "actor/perf/max_memory_reserved_gb": "device_memory_reserved_max",
    "actor/perf/cpu_memory_used_gb": "host_memory_used",
}  # verl 0.9.1's rollout_corr/* names of the mismatch signals are those signals' own `verl` names

# verl 0.9.1 names (glob patterns) that stay `grpo.extra.*` gauges, and why. `timing_s/<phase>`
# needs no entry: `otel-grpo follow` records it as a phase (`grpo.phase.duration`).
VERL_EXTRAS: dict[str, str] = {
    "critic/values/*": "PPO value-model diagnostics; GRPO trains no critic.",
    "critic/vf_*": "PPO value-model loss and clipping; GRPO trains no critic.",
    "critic/vpred_mean": "PPO value-model prediction; GRPO trains no critic.",
    "critic/loss": "PPO value-model loss; GRPO trains no critic.",
    "critic/grad_norm": "PPO value-model gradient norm; GRPO trains no critic.",
    "critic/lr": "PPO value-model learning rate; GRPO trains no critic.",
    "critic/perf/*": "PPO value-model worker's memory; GRPO trains no critic.",
    "actor/mfu": "ray_trainer renames it to perf/mfu/actor before logging (grpo.mfu).",
    "critic/mfu": "ray_trainer renames it to perf/mfu/critic before logging (grpo.mfu).",
    "timing_s/agent_loop/*": "Per-request tool-call time statistics of verl's agent loop, not a phase of the step.",
    "rollout_corr/rollout_is_*": "verl 0.9.1 computes these from its truncated (and optionally batch-normalized) weights, not seed 004's safety-bounded ones (tests/signals/test_peer_formulas.py shows the gap): a grpo.rollout_is.* series must not change meaning with the trainer.",
    "rollout_corr/rollout_rs_masked_fraction": "verl 0.9.1's rejection-sampling mask counts the options configured in the job; grpo.rollout_is.masked_fraction is seed 004's mask mode.",
    "rollout_corr/rollout_rs_seq_masked_fraction": "As rollout_rs_masked_fraction, per sequence.",
    "rollout_corr/rollout_rs_*_*": "Rejection-sampling statistics per configured option; the option names come from the job's config.",
    "training/num_turns/*": "Multi-turn agent-loop turn counts; no GRPO signal of ours.",
    "training/filter_groups/*": "DAPO dynamic-sampling bookkeeping (groups filtered, samples evicted).",
    "training/off_policy/*": "Fully-async trainer staleness bookkeeping.",
    "training/rollout_failure/*": "Fully-async trainer: samples evicted after failed rollouts.",
    "training/rollout_probs_diff_*": "verl's debug comparison in probability space; grpo.mismatch.* measures the gap in log space.",
    "training/rollout_actor_probs_pearson_corr": "verl's debug correlation of rollout and actor probabilities; no signal of ours.",
}
