"""docs/signals.md, generated from the catalog: every signal, its definition and what TRL, verl and MaxEnt-GRPO call it.

    >>> from otel_grpo.catalog._docs import render_signals_md
    >>> render_signals_md().startswith("# Signals")
    True

`otel-grpo dashboards` writes it; a test checks the committed file equals this.
"""

from __future__ import annotations

from ._signal import Group, Signal
from ._table import SIGNALS, STATE_GAUGES, TRAINER_STATE

_PEERS = (("trl", "TRL"), ("verl", "verl"), ("maxent", "MaxEnt-GRPO"))
_TITLES = {
    Group.REWARD: "Reward", Group.ADVANTAGE: "Advantage", Group.POLICY: "Policy update and clipping",
    Group.KL: "KL to the reference", Group.MISMATCH: "Rollout vs training mismatch",
    Group.ROLLOUT_IS: "Rollout IS correction", Group.LENGTH: "Completions", Group.OPTIM: "Optimisation",
    Group.THROUGHPUT: "Throughput and progress", Group.HEALTH: "Health", Group.MAXENT: "MaxEnt-GRPO",
    Group.TRL_LOGGED: "As logged by TRL (the numbers W&B shows)",
}
# Signals with a TRL name that is no key of TRL's training log: `global_step` (the log history's `step`),
# `beta` (a setting TRL does not log), `eval_<name>` (grpo.eval, itself as logged)
_NOT_IN_TRAINING_LOG = frozenset({"step", "beta", "eval_metric"})
_LOGGED = next(s for s in SIGNALS if s.key == "trl_logged")

_HEADER = """# Signals

Generated from the catalog (`otel_grpo/catalog`) by `otel-grpo dashboards`; do not edit by hand.

Every signal otel-grpo exports, how it is computed, and the name each peer logs it under.
The signal cell holds its three spellings of one name: the key (`kl`: stats dicts, the
sidecar's API columns), the OpenTelemetry name (`grpo.kl`: the sidecar's page shows it) and
the Prometheus series (`grpo_kl`: alert rules and dashboards query it).
A peer cell says **same** when the peer's code computes the same number, or **differs**
and how. Peer names resolve to the signal: `Telemetry.log_metrics` and `Step.record`
accept them as they are (`log_metrics(..., source="trl")` where a peer's name is one of our
keys: TRL's `kl` is `grpo.trl.kl`). Checked against the peers' code: TRL 1.16 (`grpo_trainer.py`),
verl 0.9.1 (`core_algos.py`, `metric_utils.py`, `rollout_corr_helper.py`: `rollout_corr/*`),
TRL's former PPOTrainer and the mismatch helper of seed 004 (`mismatch/*`, which verl 0.9.1 does
not log; both under "Other names") and the MaxEnt-GRPO metrics module (`train/*`). That module formats values
its batch pipeline computes; where seed 000 does not show the computation (clip ratios,
lengths, KL, entropy: "scalars that mirror the TRL trainer"), **same** means the quantity
its name and TRL's definition state.

## Differences that hold for many signals

- **Pooled across ranks.** Our means pool every element of every rank (one all-gather,
  exact: two ranks give what one process gives on the concatenated batch). The seed-004
  helper (its `mismatch/*` names) averages per-rank values; with unequal token counts the
  numbers differ (two ranks: `rollout_is_mean` 1.083 pooled vs 1.048 averaged,
  `rollout_is_std` 0.440 vs 0.255). verl 0.9.1 computes `critic/*`, `response_length/*` and
  `rollout_corr/*` on the driver over the whole batch, as ours; its `actor/*` values are per
  micro-batch and rank, then averaged.
- **Micro-batches.** TRL and verl log per-micro-batch values and average them (TRL's rewards,
  lengths and sampling ratios: per generation batch, averaged over the logging window); ours
  pool every micro-batch and generation batch merged into the step's stats (equal with one
  of each per logged step).
- **TRL's own numbers, as logged.** Every number TRL (or another transformers Trainer) logs at a
  training step is also exported exactly as logged, under its key: `grpo_trl_logged{metric="<key>"}`
  (`grpo.trl.logged`; from `instrument`, `OtelGrpoCallback`, `follow --trl-output`,
  `Telemetry.log_metrics(step, logs, source="trl")` and `JsonlStream(path, source="trl")` alike,
  through one mapping, `catalog.peer_scalars`). It is
  the number W&B shows as `train/<key>` and `trainer_state.json`'s `log_history` holds. So where
  TRL's value differs from ours (the micro-batch means above, at gradient accumulation or
  `logging_steps` > 1), both are in Prometheus: the `grpo_*` signal is ours, exact; `grpo_trl_logged`
  is TRL's. The TRL column names the series of each key; the dashboard's row "As logged by TRL"
  draws them, and TRL's and ours side by side for the clip ratios and KL.
- **Sample standard deviation.** Ours divide by n - 1, as torch and TRL; MaxEnt-GRPO's
  are population standard deviations (divide by n).
- **TRL PPO names without a GRPO quantity.** `objective/entropy` (summed negative
  log-probability of the sampled tokens), `objective/non_score_reward` and
  `objective/rlhf_reward` (the KL-shaped reward GRPO does not use), `loss/value_avg`,
  `val/clipfrac_avg`, `val/ratio_var`, `val/num_eos_tokens`, `episode` and `eps` have no
  catalog signal; logged, they become `grpo.extra.*` gauges.
- **Empty inputs.** A statistic with no element (a mean over no token, the minimum of no
  terminated completion) is invalid: not exported that step and listed in
  `ReducedStats.invalid`. TRL and verl report 0.0 or NaN there (the TRL integrations, `follow`
  and `log_metrics(..., source="trl")` drop TRL's 0.0 terminated lengths of a step whose every
  completion was clipped; `grpo.trl.logged` keeps them, as logged).

## Gauges hold the latest step's values only

A gauge is a per-step statistic: it has a data point (in each OTLP export, on the
trainer's `/metrics`) only while the latest step gave it a finite value. A step that has
none for it (invalid there, not logged at that step as on TRL's second-iteration steps
with `num_iterations` > 1, a failed batch, a reward function that returned None, NaN)
leaves it without a value, so Prometheus sees a gap, never the earlier step's value as
current: a scraped target's series is marked stale at once, and the next OTLP export
ends the series with a data point flagged "no recorded value" (OTLP's staleness marker),
on which the collector's Prometheus exporter drops it (until an export carrying the
marker succeeds, every export repeats it). A collector serves a series that simply stops
arriving (its process died) until `metric_expiration` (2m in `collector/config.yaml`); a
relaunched or resumed process of the run, which exports under the same target labels, ends
every untemplated per-step series of the catalog in its first export (at its start), so the
crashed attempt's last values are not served as current while it starts (templated series,
such as a reward function's or TRL's logged keys, and `grpo.extra.*` stay until the relaunch
logs them or they expire).
Several records of one step (a summary log, samples that arrive apart from the scalars)
are all that step's values; an evaluation's values (`grpo.eval`, whether from an
`evaluation=True` record or a validation verl logs on its training step's line) stay current
until the next evaluation, and the trainer's state an evaluation logs (`epoch`) until the next
training step.
These gauges are the process's state, not a step's statistic, and keep their last
value: {state}.

## An evaluation's values are `grpo.eval`

An evaluation's record (`Telemetry.log_metrics(step, values, evaluation=True)`, `logged_step(step,
evaluation=True)`; transformers' `eval_` logs, verl's `val_before_train` line) never sets a training
series. Its value of a training step's statistic is the evaluation's metric of that name:
`log_metrics(7, {"reward": 0.9}, evaluation=True)` goes out exactly as `{"eval_reward": 0.9}` does, as
`grpo_eval{metric="reward"}`, as `eval_metric/reward` in the step span and the spill (the sidecar's
`grpo.eval/reward` column), and no step check judges it; `grpo_reward_mean` keeps the step's training
value (`catalog.evaluation_key`). The trainer's state logged beside (transformers' `epoch`) stays on its
own gauge: {trainer_state} and the state gauges above.
verl's validation metrics are evaluation metrics wherever they are logged (`log_metrics(..., source="verl")`,
`otel-grpo follow`, on their own or on a `test_freq` step's line): `val-core/openai/gsm8k/reward/mean@4` is
`grpo_eval{metric="core/openai/gsm8k/reward/mean@4"}` (the name after `val-`, as TRL's `eval_` is dropped; `core/`
and `aux/` keep verl's two sections apart), the sidecar's `grpo.eval/core/openai/gsm8k/reward/mean@4` column.
A name the catalog does not know is the evaluation's metric too (`my_score`: `grpo_eval{metric="my_score"}`),
never the training run's `grpo.extra.*` gauge or step-row column of that name; its `step` (verl's
`training/global_step`) is dropped: the step index moves with training. Its per-sample
values (`ReducedStats.samples`, the per-sample columns `follow` reads from an evaluation's
completions) are not recorded: the `grpo.sample.*` histograms are the training completions'
distributions. Its sample rows (`Step.samples`) go to the sidecar at its step, beside the step's own.

## Each sample's diagnostics are measured where the step's value is

The sample table's per-completion columns (`signals.sample_diagnostics`) explain the step
values beside them, so each is measured at the same point of the step:
`kl_ref_mean`/`kl_ref_max` and `entropy_mean` in the loss passes, as `kl`, `kl_max` and
`entropy` (the demo trainer pools every pass of the update that read a completion: the
length-weighted mean of a step's `kl_ref_mean` is its `kl` and the largest `kl_ref_max` its
`kl_max`, so sorting a KL spike's samples by `kl_ref_mean` shows what drove it, even when the
policy blew up between two mini-batches); `log_ratio_*` and `is_weight_*` where the mismatch
values are (the demo trainer: scoring before the update). The TRL integrations take them from a
generation batch's first loss pass, the step's own at `num_iterations=1`
(docs/integrations.md).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _peer(signal: Signal, peer: str) -> str:
    name = getattr(signal, peer)
    if not name:
        return ""
    how = signal.difference(peer)
    text = f"`{name}` same" if how is None else f"`{name}` differs: {_cell(how)}"
    if peer == "trl" and signal.key not in _NOT_IN_TRAINING_LOG:
        logged = name.replace("{", "<").replace("}", ">")
        text += f"; as logged: `{_LOGGED.prometheus_name}{{{_LOGGED.label}=\"{logged}\"}}`"
    return text


def _row(signal: Signal) -> str:
    named = signal.point_labels
    label = f" (attribute{'s' * (len(named) > 1)} {', '.join(f'`{a}`' for a in named)})" if named else ""
    cells = [f"`{signal.key}`{label}<br>`{signal.name}`<br>`{signal.prometheus_name}`", f"{signal.kind.value}, `{signal.unit}`",
             _cell(signal.description)]
    cells += [_peer(signal, peer) for peer, _ in _PEERS]
    other = ", ".join(f"`{a}`" for a in signal.aliases)
    if other and signal.difference("other"):
        other += f" differs: {_cell(signal.difference('other'))}"
    cells.append(other)
    return "| " + " | ".join(cells) + " |"


def render_signals_md() -> str:
    """The whole of docs/signals.md."""
    head = "| signal | kind, unit | definition | " + " | ".join(t for _, t in _PEERS) + " | other names |"
    rule = "|" + " --- |" * (len(_PEERS) + 4)
    by_key = {s.key: s for s in SIGNALS}
    state = ", ".join(f"`{by_key[k].name}`" for k in sorted(STATE_GAUGES, key=[s.key for s in SIGNALS].index))
    trainer_state = ", ".join(f"`{by_key[k].name}`" for k in sorted(TRAINER_STATE - STATE_GAUGES,
                                                                    key=[s.key for s in SIGNALS].index))
    parts = [_HEADER.replace("{state}", state).replace("{trainer_state}", trainer_state)]
    for group in Group:
        members = [s for s in SIGNALS if s.group is group]
        if members:
            parts.append(f"\n## {_TITLES.get(group, group.value)}\n\n{head}\n{rule}\n" +
                         "\n".join(_row(s) for s in members) + "\n")
    return "".join(parts)
