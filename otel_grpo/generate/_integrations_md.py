"""docs/integrations.md: how TRL runs are instrumented and where each TRL key goes, from the catalog.

    >>> render_integrations_md().startswith("# Integrations")
    True

The key table is catalog data (`peer_names("trl")`): rendering it imports neither TRL nor
`otel_grpo.integrations`.
"""

from __future__ import annotations

from otel_grpo.catalog import peer_names

_COMPUTED_NOTE = {
    "kl": "TRL's own estimator (bias-corrected by default); the plain k3 KL is `grpo.kl`, computed from TRL's tensors by `instrument`",
    "sampling/importance_sampling_ratio/mean": "after TRL's truncation or masking; the raw ratios are `grpo.mismatch.is_ratio.*`",
}


def render_integrations_md() -> str:
    """docs/integrations.md: how TRL runs are instrumented and where each TRL key goes (from the catalog)."""
    lines = [
        "# Integrations",
        "",
        "<!-- Generated from the catalog by `otel-grpo dashboards`; do not edit by hand. -->",
        "",
        "## TRL",
        "",
        "One line after constructing a `trl.GRPOTrainer` (or a subclass):",
        "",
        "```python",
        "from otel_grpo.integrations import instrument",
        "",
        "trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...)",
        "instrument(trainer)   # run id and output dir from args; grpo.run.finished at train end",
        "trainer.train()",
        "```",
        "",
        "`instrument` computes every signal from TRL's own tensors (rewards per function, advantages,",
        "completion lengths and ids, per-token log-probs of the policy, the old policy, the reference",
        "and, with vLLM, the sampler) through `otel_grpo.signals`, with one `reduce_stats` per logged",
        "step: exact (token-weighted) across micro-batches, gradient accumulation, `logging_steps` and",
        "ranks. Samples are sent once per generation batch. The keys TRL logs that it computes itself",
        "are replaced by the exact values; the others (`grad_norm`, `learning_rate`, `epoch`, ...) pass",
        "through the mapping below. Any `transformers.Trainer` can use the log-dict path instead:",
        "`Trainer(..., callbacks=[OtelGrpoCallback()])`.",
        "",
        "Settings come from `instrument`'s keyword arguments (`TelemetrySettings` fields), then the",
        "`OTEL_GRPO_*` variables; only where neither gives one does `instrument` derive the run id",
        "(`args.run_name`, else the output dir's name), the spill's output dir (`args.output_dir`) and",
        "the model name (the model's `_name_or_path`) from the trainer. So `OTEL_GRPO_RUN_ID` set in a",
        "job spec names the run.",
        "",
        "Capture never stops training: a failure logs one warning and turns the tensor signals off",
        "(the logged values still export). With several processes the ranks agree at each logged",
        "step (one small all-reduce), so a failure on one rank turns capture off on all of them and",
        "no rank is left waiting in a collective.",
        "",
        "The telemetry `instrument` builds emits from a child process (`emit_in=\"process\"`): the",
        "emitter and the OTel exporters spend about a millisecond of Python per logged step, and in",
        "the training process they would hold the GIL that a TRL step, Python-bound between its torch",
        "ops, waits for. The training thread pickles each logged step's record (tens of microseconds)",
        "and a sender thread passes on the records of each quarter second together (it sleeps while",
        "none come, so it costs nothing between logged steps). The child serves the Prometheus port and",
        "writes the sample spill; each step stays in the trainer until the child has emitted it, so",
        "if the child dies the trainer takes over with one warning and emits those steps again. The",
        "child ignores Ctrl-C and SIGTERM (the trainer ends the run and closes it) and ends the run as",
        "a crash when the trainer is killed. `instrument(trainer, emit_in=\"thread\")` or",
        "`OTEL_GRPO_EMIT_IN=thread` keeps everything in the training process.",
        "",
        "A second `trainer.train()` in the same process (a notebook re-run, a resume after Ctrl-C),",
        "and a `trainer.evaluate()` outside training (the final evaluation), export again through a new",
        "Telemetry built the same way, finished when the call returns; an evaluation during training",
        "(`eval_strategy`) belongs to the training run. A Telemetry you passed to `instrument` is closed",
        "by the first `train()`, so a later call warns and exports nothing until `instrument(trainer)` is",
        "called again. Calling `instrument` again on the same trainer replaces its telemetry and adds no",
        "second callback.",
        "",
        "A scheduler's SIGTERM (SLURM's preemption or time limit, a Kubernetes eviction) ends the run as",
        "preempted (`grpo.run.preempted` = 1: GRPORunPreempted, a warning to resume it, not a crash page)",
        "and then lets the signal end the process as it would have; a program that handles SIGTERM",
        "itself keeps its handler and can call `telemetry.shutdown(preempted=True)` from it.",
        "",
        "TRL's keys go through the catalog's one name resolver with `source=\"trl\"`, the same as",
        "`Telemetry.log_metrics(step, logs, source=\"trl\")` and `otel-grpo follow --trl-output`: where",
        "TRL's name is also one of our keys, TRL's meaning wins (its `kl` is `grpo.trl.kl`; our `kl`,",
        "`grpo.kl`, is plain k3). A reward function whose name holds slashes (`org/model`) keeps them",
        "in the `reward_fn` attribute.",
        "",
        "`eval_<name>` keys become `grpo.eval{metric=\"<name>\"}`. A `None` (TRL's mean of only NaN)",
        "or NaN value is counted in `grpo.nonfinite{signal=...}` instead of being exported. Keys the",
        "catalog does not know (your own `log_metric`s) become `grpo.extra.<key>` gauges.",
        "",
        "| TRL / transformers key | signal | Prometheus | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for key, s in peer_names("trl"):
        note = _COMPUTED_NOTE.get(key)
        meaning = s.description + (f" ({note})" if note else "")
        lines.append(f"| `{key}` | `{s.name}` | `{s.prometheus_name}` | {meaning.replace('|', '/')} |")
    lines += [
        "",
        "Signals `instrument` adds that TRL does not log: reward quantiles (`grpo.reward.p05/p50/p95`),",
        "min/max, group std, advantages, length std and distinct-n, policy ratio and `approx_kl`, KL",
        "k1/k3/max/per-sequence, per-sample histograms, phase spans (`rollout`, `reward`,",
        "`reward.<function>`, `old_logprobs`, `reference`, `update`) and, whenever the trainer holds",
        "sampling log-probs (vLLM), the `grpo.mismatch.*` and `grpo.rollout_is.*` sets.",
        "",
        "Notes:",
        "",
        "- The hooks keep references to TRL's tensors (detached; with tools, the tool mask applied) and",
        "  compute nothing per step, the loss included; the stats of every micro-batch and generation",
        "  batch a logged step covers are computed at that step, in one pass over their concatenation",
        "  (at `logging_steps=10`, one pass of torch ops where one per micro-batch made ten), under",
        "  `torch.inference_mode`. Past 64 MiB of held tensors they are computed early, which bounds the",
        "  device memory kept between logged steps. A logged step costs one collective and one",
        "  device-to-host copy, which also brings the sample rows' rewards, advantages and per-row",
        "  diagnostics.",
        "- Reward stats are taken over whole prompt groups of the rewards TRL gathers from every rank",
        "  (each group on one rank), so group std and `frac_zero_std` are exact when a group's",
        "  completions are spread over several ranks.",
        "- Clip ratios follow the loss type: with TRL's `importance_sampling_level=\"token\"` (its default)",
        "  they are token fractions; with `\"sequence\"` (GSPO, luspo) they are fractions of sequences whose",
        "  sequence-level ratio TRL clipped, as TRL logs them. Loss types without a two-sided clip export no",
        "  `grpo.clip_ratio.*`: cispo's truncation is TRL's `cispo_clip_ratio` (`grpo.trl.cispo_clip_ratio`),",
        "  sapo and vespo clip nothing. The policy ratio stats stay token-level.",
        "- `scale_rewards=\"batch\"`: `frac_reward_zero_std` stays the fraction of prompt groups whose rewards",
        "  are all equal (no learning signal in those groups), while TRL then logs whether the whole batch's",
        "  std is zero (0 or 1); the two differ by design.",
        "- Sample rows are offered on every rank; which of them are kept follows `Telemetry`'s selection",
        "  (only the exporting rank's rows until it selects across ranks).",
        "- Each sample row carries its completion's own numbers (`signals.sample_diagnostics`) from its",
        "  first pass through TRL's loss: `log_ratio_mean/absmax` and `is_weight_mean/max` of the policy",
        "  against the one that sampled it (vLLM's log-probs when TRL has them, else the old policy: 1 with",
        "  `num_iterations=1`), `kl_ref_mean/max` (k3 to the reference, only with `beta != 0`),",
        "  `entropy_mean` and `length_clipped`. They travel in the logged step's one reduction (no extra",
        "  host copy). Rows not yet through the loss at a logged step (`steps_per_generation` >",
        "  `gradient_accumulation_steps`) go out at the next logged step or at the end of training.",
        "- Only `train()` is instrumented; evaluation keeps TRL's logged `eval_*` values.",
        "",
    ]
    return "\n".join(lines)
