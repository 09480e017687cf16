"""Grafana dashboards generated from the catalog; `otel-grpo dashboards` writes them.

    >>> from otel_grpo.generate.dashboards import overview
    >>> overview()["uid"]
    'grpo-overview'

Panels name the signals they draw by catalog key; any catalog signal no curated
panel names lands in a "more" panel of its group, so every signal is on the
dashboard even after the catalog grows. Layout is computed, so panels never
overlap.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Iterable, Iterator

from otel_grpo import catalog
from otel_grpo.catalog import Group

from ._configs import COMPOSE
from ._panels import (INFINITY, INFINITY_UID, PROM, PROM_UID, RUN, Panel, Query, current_copy, render, row,
                      signal_queries, unit_of)
from ._rules import THRESHOLD_RECORD, RuleSettings

UID = "grpo-overview"
"""The overview's uid: its URL (`/d/<uid>/`) and the alerts' dashboard links."""
MAX_SIGNALS = 8
STEP_ALIGNED = ("kl", "reward", "entropy", "clip_ratio_region_mean", "completions_clipped_ratio")
"""The scalars of the step-aligned run comparison (the sidecar's step history)."""
"""Signals of one leftover panel (one series each per selected run)."""

COMPARE_TITLE = "Runs compared by step: ${compare}"
STACK_TARGETS = "Stack: collector and sidecar scraped (1 = up)"
STACK_COLLECTOR = "Collector: refused, failed and queued data"
STACK_SIDECAR = "Sidecar: rejected requests by reason"
"""The stack-health panels the infrastructure alerts link to (their `dashboard_url`)."""
SIDECAR_PAGE_LIMIT = 200
SIDECAR_RUNS = 100  # runs a sidecar panel lists or overlays (the sidecar's default cap of /api/steps)
SIDECAR_POINTS = 1000  # rows per run of the step-aligned comparison: about a panel's width


def _signals(title: str, keys: Iterable[str], *, unit: str | None = None, extra: Iterable[Query] = (),
             description: str = "", **draw: object) -> Panel:
    """A panel drawing the named catalog signals (and any extra queries); `draw`: Panel's drawing fields."""
    signals = [catalog.get(k) for k in keys]
    queries = [q for s in signals for q in signal_queries(s)] + list(extra)
    panel_unit = unit or (unit_of(signals[0]) if signals else "short")
    desc = description or " ".join(f"{s.key}: {s.description}" for s in signals)
    return Panel(title, queries, unit=panel_unit, description=desc, signals=tuple(keys), **draw)  # type: ignore[arg-type]


def _rec(expr: str, legend: str) -> Query:
    return Query(expr, legend)


def _trend_streaks(limits: RuleSettings) -> str:
    """Each trend check's current streak at its default bound (its setting's), by run."""
    streak = catalog.get("step_streak").prometheus_name
    parts = [f'{streak}{{{RUN}, signal="{check}", bound="{catalog.bound_label(getattr(limits, field))}"}}'
             for field, check in catalog.STEP_THRESHOLDS.items() if check in catalog.TRENDS]
    either = " or ".join(parts)
    return f"max by (run_id, signal) {current_copy(f'({either})', catalog.get('step_streak').point_labels)}"


def _overridden(limits: RuleSettings, name: str) -> list[Query]:
    """The per-run thresholds of `name` (`overrides`) as lines of their own; the default is the red line."""
    if not limits.overridden(name):
        return []
    return [Query(f"{THRESHOLD_RECORD}{name}{{{RUN}}}", f"{name} {{{{run_id}}}}")]


# (row title, group(s) whose leftover signals join the row, panels)
def _sections(limits: RuleSettings) -> list[tuple[str, Group | tuple[Group, ...], list[Panel]]]:
    """Rows and panels; `limits`: the rule settings whose thresholds the panels draw."""
    return _learning_sections(limits) + _rollout_sections(limits)


def _learning_sections(limits: RuleSettings) -> list[tuple[str, Group | tuple[Group, ...], list[Panel]]]:
    """Rows about what the policy learns: alerts first, then reward, advantage, KL and policy."""
    return [
        ("Health and alerts", Group.HEALTH, [
            _signals("Non-finite values and skipped steps", ["nonfinite", "skipped_steps"]),
            Panel("Firing alerts", [Query('ALERTS{alertstate="firing"}', "{{alertname}} {{run_id}}", instant=True)],
                  kind="table", description="Alerts Prometheus holds as firing right now, for every run."),
        ]),
        ("Reward", Group.REWARD, [
            _signals("Reward mean, std, min, max", ["reward", "reward_std", "reward_min", "reward_max"]),
            _signals("Reward quantiles (exact gauges and per-sample histogram)",
                     ["reward_p00", "reward_p05", "reward_p25", "reward_p50", "reward_p75", "reward_p95", "reward_p100",
                      "sample_reward"]),
            _signals("Reward per function", ["reward_fn_mean", "reward_fn_std"]),
            _signals("Reward per function: quantiles (exact gauges and per-sample histogram)",
                     ["reward_fn_p05", "reward_fn_p50", "reward_fn_p95", "sample_reward_fn"]),
            _signals("Learning signal: within-group reward std, groups with zero std",
                     ["reward_group_std", "frac_reward_zero_std"], unit="short",
                     threshold=limits.zero_std_threshold, right_axis={"frac_reward_zero_std.*": "percentunit"},
                     extra=_overridden(limits, "zero_std_threshold")),
        ]),
        ("Advantage", Group.ADVANTAGE, [
            _signals("Advantage mean (per completion and per token), std, min, max",
                     ["advantage_mean", "advantage_token_mean", "advantage_std", "advantage_min", "advantage_max"]),
            _signals("Advantage per sample (histogram)", ["sample_advantage"]),
        ]),
        ("KL and policy", (Group.KL, Group.POLICY), [
            # Log scale: k3 estimates only (never negative); the k1 estimates go below zero.
            _signals("KL to the reference", ["kl", "kl_max", "kl_seq_mean", "step_kl"],
                     extra=_overridden(limits, "kl_threshold"),
                     threshold=limits.kl_threshold, log_scale=True),
            _signals("KL k1 estimates (unbiased per token, negative at times)", ["kl_k1", "kl_k1_seq_mean"]),
            Panel(f"Trend checks: consecutive steps beyond (alerts at {limits.drift_steps})",
                  [Query(_trend_streaks(limits), "{{signal}} {{run_id}}")],
                  threshold=limits.drift_steps,
                  description="The training process judges every step against the run's own recent steps: a KL jump "
                              "(robust z-score), a reward collapse (in its step-to-step noise), entropy and throughput "
                              "against their mean. Each line is the current streak at the default alert bound."),
            _signals("Clip ratios (low, high, region)",
                     ["clip_ratio_low_mean", "clip_ratio_low_min", "clip_ratio_high_mean", "clip_ratio_high_max",
                      "clip_ratio_region_mean", "dual_clip_fraction"], threshold=limits.clip_ratio_threshold,
                     extra=_overridden(limits, "clip_ratio_threshold")),
            _signals("Policy ratio pi_theta / pi_old and approx KL (k2 and verl's k1)",
                     ["policy_ratio_mean", "policy_ratio_min", "policy_ratio_max", "approx_kl", "ppo_kl"], unit="short"),
            _signals("KL per completion token by completion length", ["kl_by_length"]),
            _signals("Entropy", ["entropy"]),
        ]),
    ]


def _rollout_sections(limits: RuleSettings) -> list[tuple[str, Group | tuple[Group, ...], list[Panel]]]:
    """Rows about the rollout engine: mismatch, IS correction, completions, optimiser, throughput."""
    return [
        ("Rollout vs training mismatch", Group.MISMATCH, [
            _signals("Mismatch KL (k3)", ["mismatch_k3_kl"], unit="short", threshold=limits.mismatch_kl_threshold,
                     extra=_overridden(limits, "mismatch_kl_threshold"), log_scale=True),
            # Sample estimates: negative at times, so a linear axis.
            _signals("Mismatch KL (direct, k1) and chi-square",
                     ["mismatch_kl", "mismatch_chi2_token", "mismatch_chi2_seq"], unit="short",
                     threshold=limits.chi2_threshold, extra=_overridden(limits, "chi2_threshold")),
            _signals("IS ratio pi_train / pi_rollout: mean, min, max", ["is_ratio_mean", "is_ratio_min", "is_ratio_max"],
                     unit="short"),
            _signals("Perplexity: training, rollout, ratio",
                     ["mismatch_training_ppl", "mismatch_rollout_ppl", "mismatch_ppl_ratio"], unit="short"),
            _signals("Log perplexity and its differences",
                     ["mismatch_training_log_ppl", "mismatch_rollout_log_ppl", "mismatch_log_ppl_diff",
                      "mismatch_log_ppl_abs_diff", "mismatch_log_ppl_diff_max", "mismatch_log_ppl_diff_min"]),
            _signals("Token log-prob |train - rollout|", ["mismatch_logprob_abs_diff", "mismatch_logprob_abs_diff_max"]),
            _signals("IS ratio per completion (histogram)", ["sample_is_ratio"], unit="short"),
        ]),
        ("Rollout IS correction", Group.ROLLOUT_IS, [
            _signals("IS weight mean, std, min, max",
                     ["rollout_is_mean", "rollout_is_std", "rollout_is_min", "rollout_is_max"], unit="short"),
            _signals("Effective sample size, masked and vetoed fractions",
                     ["rollout_is_eff_sample_size", "rollout_is_masked_fraction", "rollout_is_seq_masked_fraction",
                      "rollout_is_veto_fraction", "rollout_is_catastrophic_token_fraction"],
                     threshold=limits.ess_min, extra=_overridden(limits, "ess_min")),
            _signals("Weights beyond the thresholds", ["rollout_is_ratio_fraction_high", "rollout_is_ratio_fraction_low",
                                                       "rollout_is_seq_fraction_high", "rollout_is_seq_fraction_low"]),
            _signals("Per-sequence IS weight",
                     ["rollout_is_seq_mean", "rollout_is_seq_std", "rollout_is_seq_min", "rollout_is_seq_max",
                      "rollout_is_seq_max_deviation"], unit="short"),
        ]),
        ("Completions", Group.LENGTH, [
            _signals("Completion length", ["completion_length_mean", "completion_length_std", "completion_length_min",
                                           "completion_length_max"]),
            _signals("Terminated (EOS) length", ["terminated_length_mean", "terminated_length_min",
                                                 "terminated_length_max"]),
            _signals("Clipped completions (no EOS)", ["completions_clipped_ratio"],
                     threshold=limits.completions_clipped_threshold,
                     extra=_overridden(limits, "completions_clipped_threshold")),
            _signals("Completion length per sample (histogram)", ["sample_completion_length"]),
            _signals("Diversity: distinct n-grams (pooled and within prompt groups), Jaccard within groups",
                     ["distinct_1", "distinct_2", "distinct_1_group", "distinct_2_group", "jaccard_group"]),
        ]),
        ("Optimisation", Group.OPTIM, [
            _signals("Loss and gradient norm", ["loss", "grad_norm"], right_axis={"grad_norm.*": "short"}),
            _signals("Loss parts: policy, beta * KL, entropy", ["loss", "loss_policy", "loss_kl", "loss_entropy"]),
            _signals("Learning rate and KL coefficient", ["learning_rate", "beta"], right_axis={"beta.*": "short"}),
        ]),
        ("MaxEnt-GRPO weighting and controllers", Group.MAXENT, [
            _signals("Temperature tau and beta", ["maxent_tau", "beta", "maxent_delta_tau", "maxent_delta_beta"],
                     unit="short"),
            _signals("Weight entropy and its EMA", ["maxent_weight_entropy", "maxent_weight_entropy_ema",
                                                    "maxent_tau_target_entropy", "maxent_weight_entropy_error"]),
            _signals("Entropy bonus", ["maxent_entropy_bonus_mean", "maxent_entropy_bonus_coef",
                                       "maxent_entropy_bonus_frac_of_base", "maxent_entropy_bonus_frac_of_total"],
                     unit="short"),
            _signals("q entropy", ["maxent_q_entropy_mean", "maxent_q_entropy_min", "maxent_q_entropy_max"]),
            _signals("SEED-GRPO semantic entropy and advantage scale",
                     ["maxent_seed_semantic_entropy_mean", "maxent_seed_advantage_scale_mean",
                      "maxent_seed_alpha_effective"], unit="short"),
            _signals("KL controller", ["maxent_kl_controller_target", "maxent_kl_error_to_target",
                                       "maxent_kl_ratio_to_target"], unit="short"),
        ]),
        ("Throughput and progress", Group.THROUGHPUT, [
            _signals("Step index and steps per second", ["step", "steps"],
                     extra=[_rec(f"run_id:grpo_steps:rate{{{RUN}}}", "steps /s (recorded) {{run_id}}")]),
            _signals("Tokens per second", ["tokens_per_second", "tokens_per_second_per_gpu", "tokens"],
                     extra=[_rec(f"run_id:grpo_tokens:rate{{{RUN}}}", "tokens /s (recorded) {{run_id}}")],
                     per_second=True),
            _signals("Tokens so far, completions per second", ["num_tokens", "samples"],
                     extra=[_rec(f"run_id:grpo_samples:rate{{{RUN}}}", "samples /s (recorded) {{run_id}}")]),
            _signals("Step time, time between reported steps", ["step_time", "log_interval"]),
            _signals("Phase durations (quantiles per phase)", ["phase_duration"], unit="s"),
        ]),
        ("As logged by TRL (the numbers W&B shows)", Group.TRL_LOGGED, _trl_logged_panels()),
    ]


TRL_KEY = "trl_key"
"""The dashboard variable of the TRL keys drawn as logged (`grpo.trl.logged`'s `metric` attribute)."""
# (TRL key, our signal of it) drawn side by side: where TRL's mean of per-micro-batch values and our
# exact value differ most with gradient accumulation or logging_steps > 1
_CLIPS = ("clip_ratio_low_mean", "clip_ratio_low_min", "clip_ratio_high_mean", "clip_ratio_high_max",
          "clip_ratio_region_mean")
_KL_ENTROPY = ("trl_kl", "entropy")


def _as_logged(trl_key: str) -> Query:
    logged = catalog.get("trl_logged")
    series = f'{logged.prometheus_name}{{{RUN}, {logged.label}="{trl_key}"}}'
    return Query(f"max by (run_id) {current_copy(series, logged.point_labels)}",
                 f"{trl_key}: TRL (as logged) {{{{run_id}}}}")


def _ours_and_trls(title: str, keys: Iterable[str], **draw: object) -> Panel:
    """Our exact signals and TRL's logged numbers of the same keys, one pair of series per key and run."""
    queries: list[Query] = []
    for key in keys:
        signal = catalog.get(key)
        if signal.trl is None:
            raise ValueError(f"{key!r} has no TRL name to draw as logged")
        queries += [Query(signal_queries(signal)[0].expr, f"{signal.trl}: ours (exact) {{{{run_id}}}}"),
                    _as_logged(signal.trl)]
    return Panel(title, queries, signals=tuple(keys), description=(
        "Ours: exact over every token of the steps a log covers. TRL's: the number it logged (W&B's "
        "train/<key>), for most keys the mean of per-micro-batch values; the two differ with gradient "
        "accumulation or logging_steps > 1 (docs/signals.md)."), **draw)  # type: ignore[arg-type]


def _trl_logged_panels() -> list[Panel]:
    """TRL's own numbers as it logged them (any key, picked), and next to ours where they differ most."""
    logged = catalog.get("trl_logged")
    series = f'{logged.prometheus_name}{{{RUN}, {logged.label}=~"${TRL_KEY}"}}'
    picked = Query(f"max by (run_id, {logged.label}) {current_copy(series, logged.point_labels)}",
                   f"{{{{{logged.label}}}}} {{{{run_id}}}}")
    return [
        Panel(f"As logged by TRL: ${TRL_KEY}", [picked], width=24, signals=(logged.key,),
              description=logged.description),
        _ours_and_trls("Clip ratios: ours (exact) and as logged by TRL", _CLIPS, unit="percentunit"),
        _ours_and_trls("KL and entropy: ours (exact) and as logged by TRL", _KL_ENTROPY),
    ]


def _step_columns() -> list[str]:
    """The sidecar's step-history columns of the step-aligned scalars (catalog names, as the API names them)."""
    return [catalog.get(k).name for k in STEP_ALIGNED]


def _samples_panels() -> list[Panel]:
    """Tables read from the sidecar's JSON API through the Infinity datasource."""
    def table(title: str, url: str, params: dict[str, str], width: int, height: int, repeat: str | None = None,
              kind: str = "table", partition_by: str | None = None, note: str = "") -> Panel:
        return Panel(title, kind=kind, width=width, height=height, repeat=repeat, partition_by=partition_by, infinity={
            "type": "json", "source": "url", "format": "table", "parser": "backend", "root_selector": "",
            "url": url, "url_options": {"method": "GET", "params": [{"key": k, "value": v} for k, v in params.items()]},
            "columns": [],
        }, description=f"From the sidecar: GET {url}" + (f". {note}" if note else "")
           + ". Through the Infinity plugin: a missing plugin shows here as \"plugin not found\" (docs/operations.md, "
             "Grafana without internet)")

    # Runs with data in the dashboard's time range (Unix milliseconds: the sidecar reads them as such).
    in_range = {"since": "${__from}", "until": "${__to}"}

    return [
        # The run id is a path segment: percent-encoded (a run id may hold any character). One
        # table per selected run (Grafana repeats the panel), so several runs and "All" work.
        table("Samples of the latest step (sidecar)", "/api/runs/${run_id:percentencode}/samples",
              {"limit": str(SIDECAR_PAGE_LIMIT), "order_by": "reward", "desc": "true"}, 24, 12, repeat="run_id"),
        # Several runs as `a|b`; "All" is `.*`, which the sidecar reads as every run.
        table("Alerts received by the sidecar", "/api/alerts", {"run_id": "${run_id:pipe}"}, 12, 8),
        table("Runs (sidecar)", "/api/runs", {**in_range, "limit": str(SIDECAR_RUNS)}, 12, 8,
              note=f"The {SIDECAR_RUNS} most recently updated runs with data in the time range."),
        # Every step, exact (Prometheus samples them), against the step: one panel per selected
        # run, repeated one under the other, so runs line up by step rather than by time.
        table("Step-exact history by step (sidecar)", "/api/runs/${run_id:percentencode}/steps",
              {"metrics": ",".join(_step_columns())}, 24, 8, repeat="run_id", kind="trend"),
        # The selected runs overlaid in one panel, x = the training step (runs started at different
        # times line up): one scalar at a time (variable `compare`), one series per run.
        # At most SIDECAR_RUNS runs (the sidecar's cap; "All" over thousands of runs is their most recently
        # updated), each downsampled to SIDECAR_POINTS rows that keep every bucket's extremes.
        table(f"{COMPARE_TITLE} (sidecar)", "/api/steps",
              {"run_id": "${run_id:pipe}", "metrics": "${compare}", **in_range, "max_runs": str(SIDECAR_RUNS),
               "points": str(SIDECAR_POINTS)},
              24, 10, kind="trend", partition_by="run_id",
              note=f"At most the {SIDECAR_RUNS} most recently updated of the selected runs with data in the time "
                   f"range, each downsampled to {SIDECAR_POINTS} rows (every bucket's first, last, lowest and "
                   "highest step)."),
    ]


def _with_leftovers(sections: list[tuple[str, Group | tuple[Group, ...], list[Panel]]]
                    ) -> Iterator[tuple[str, list[Panel]]]:
    """Append a 'more' panel for each row's signals that no curated panel names."""
    named = {q.expr for _, _, panels in sections for p in panels for q in p.queries}
    keys = {k for _, _, panels in sections for p in panels for k in p.signals}
    placed: set[Group] = set()
    for title, groups, panels in sections:
        groups = groups if isinstance(groups, tuple) else (groups,)
        placed.update(groups)
        left = [s.key for s in catalog.SIGNALS if s.group in groups and s.key not in keys
                and not any(q.expr in named for q in signal_queries(s))]
        chunks = [left[i:i + MAX_SIGNALS] for i in range(0, len(left), MAX_SIGNALS)]
        for i, chunk in enumerate(chunks):  # a few signals a panel: 54 series are unreadable
            part = f" ({i + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            panels = panels + [_signals(f"More {title.lower()} signals{part}", chunk, unit="short")]
        yield title, panels
    if set(Group) - placed:  # a new group must get a row, or its signals vanish
        raise RuntimeError(f"dashboard rows miss catalog groups {sorted(g.value for g in set(Group) - placed)}")


def _stack_panels() -> list[Panel]:
    """The stack's own health: what GRPOCollectorDown, GRPOSidecarDown and the collector/sidecar alerts watch.

    Targets are told by what they serve (the alerts' `job_instance:*:seen` records), not by `job`."""
    rate = lambda m, by: f"sum by ({by}) (rate({m}[$__rate_interval]))"  # noqa: E731
    return [
        Panel(STACK_TARGETS, [
            Query("max by (instance) (up and on (job, instance) job_instance:collector:seen)", "collector {{instance}}"),
            Query("max by (instance) (up and on (job, instance) job_instance:sidecar:seen)", "sidecar {{instance}}"),
        ], width=8, description="0: Prometheus cannot scrape it (GRPOCollectorDown, GRPOSidecarDown)."),
        Panel(STACK_COLLECTOR, [
            Query(rate("otelcol_receiver_refused_metric_points_total", "receiver"), "refused points {{receiver}} /s"),
            Query(rate("otelcol_receiver_refused_spans_total", "receiver"), "refused spans {{receiver}} /s"),
            Query(rate("otelcol_exporter_send_failed_spans_total", "exporter"), "failed spans {{exporter}} /s"),
            Query(rate("otelcol_exporter_enqueue_failed_spans_total", "exporter"), "dropped (queue full) {{exporter}} /s"),
            Query("max by (exporter) (otelcol_exporter_queue_size / otelcol_exporter_queue_capacity)",
                  "queue fill {{exporter}}"),
        ], width=8, right_axis={"queue fill.*": "percentunit"},
            description="GRPOCollectorRefusing, GRPOCollectorExportFailing, GRPOCollectorQueueFull (fill above 80 %)."),
        Panel(STACK_SIDECAR, [Query(rate("otel_grpo_sidecar_requests_rejected_total", "reason"), "{{reason}} /s")],
              width=8, description="GRPOSidecarRejecting: overloaded, unauthorized, malformed, store_unavailable."),
    ]


def _rows(limits: RuleSettings) -> list[tuple[str, list[Panel]]]:
    """Every row of the overview with its panels, in reading order (what the layout places).

    The stack's health comes last: new panels there leave every other panel's id (the alerts' links) as it is."""
    return list(_with_leftovers(_sections(limits))) + [("Samples and alerts (sidecar)", _samples_panels()),
                                                       ("Stack health", _stack_panels())]


def _numbered(rows: list[tuple[str, list[Panel]]]) -> Iterator[tuple[int, str, list[tuple[int, Panel]]]]:
    """Each row's id, title and panels with their ids: ids count up in reading order, a row before its panels.

    The one place panel ids are given: the layout and the alerts' links (`panel_id`) both take them from here.
    """
    next_id = 1
    for title, panels in rows:
        yield next_id, title, [(next_id + 1 + i, panel) for i, panel in enumerate(panels)]
        next_id += 1 + len(panels)


def _place(panels: list[tuple[int, Panel]], y: int) -> tuple[list[dict], int]:
    """Panels left to right, top to bottom from row y; returns them and the next free y."""
    out, x, line_height = [], 0, 0
    for pid, panel in panels:
        if x + panel.width > 24:
            x, y, line_height = 0, y + line_height, 0
        out.append(render(panel, pid, x, y))
        x += panel.width
        line_height = max(line_height, panel.height)
    return out, y + line_height


def _layout(rows: Iterable[tuple[int, str, list[tuple[int, Panel]]]]) -> list[dict]:
    """Rows on the 24-column grid: the first (overview) open, the others collapsed with their panels inside."""
    out: list[dict] = []
    y = 0
    for i, (row_id, title, panels) in enumerate(rows):
        header = row(title, row_id, y, collapsed=i > 0)
        out.append(header)
        placed, end = _place(panels, y + 1)
        if i == 0:
            out += placed
            y = end
        else:  # a collapsed row keeps its panels (at their expanded positions) and takes one line
            header["panels"] = placed
            y += 1
    return out


def _variables() -> list[dict]:
    """The Prometheus datasource, the sidecar (an Infinity datasource), the runs (several at once, matched as a
    regex), the scalar compared by step and the TRL keys drawn as logged."""
    logged = catalog.get("trl_logged")
    return [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {"text": "Prometheus", "value": PROM_UID}, "hide": 0, "refresh": 1, "regex": ""},
        {"name": "sidecar", "label": "Sidecar", "type": "datasource", "query": INFINITY["type"],
         "current": {"text": "Sidecar", "value": INFINITY_UID}, "hide": 0, "refresh": 1, "regex": ""},
        {"name": "run_id", "label": "run", "type": "query", "datasource": PROM,
         "query": {"query": "label_values(grpo_step_index, run_id)", "refId": "run_id"},
         "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": catalog.spans.ALL_RUNS,
         "current": {"text": ["All"], "value": ["$__all"]}},
        # The scalar the step-aligned run comparison draws.
        {"name": "compare", "label": "compare by step", "type": "custom", "query": ",".join(_step_columns()),
         "multi": False, "includeAll": False, "hide": 0,
         "current": {"text": _step_columns()[0], "value": _step_columns()[0]},
         "options": [{"text": c, "value": c, "selected": i == 0} for i, c in enumerate(_step_columns())]},
        # The TRL keys the row "As logged by TRL" draws: those the selected runs logged (all by default).
        {"name": TRL_KEY, "label": "TRL key (as logged)", "type": "query", "datasource": PROM,
         "query": {"query": f"label_values({logged.prometheus_name}{{{RUN}}}, {logged.label})", "refId": TRL_KEY},
         "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": ".*",
         "current": {"text": ["All"], "value": ["$__all"]}},
    ]


def overview(limits: RuleSettings | None = None) -> dict:
    """The GRPO overview dashboard: one or several runs picked from Prometheus."""
    return {
        "uid": UID,
        "title": "GRPO overview",
        "description": "Reward, KL, clipping, rollout-vs-training IS mismatch, lengths, throughput and alerts of GRPO runs.",
        "tags": ["grpo", "otel-grpo"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        # Refreshing faster than Prometheus scrapes redraws the same data.
        "refresh": COMPOSE.scrape_interval,
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": _variables()},
        "annotations": {"list": [{
            "name": "Firing alerts", "enable": True, "datasource": PROM, "iconColor": "red",
            "expr": f'ALERTS{{alertstate="firing", {RUN}}}', "titleFormat": "{{alertname}}",
            "textFormat": "{{alertname}} ({{severity}})", "step": "30s",
        }]},
        "panels": _layout(_numbered(_rows(limits or RuleSettings()))),
    }


def dashboards(limits: RuleSettings | None = None) -> dict[str, dict]:
    """Every generated dashboard by file name under `grafana/dashboards/`; thresholds from `limits`."""
    return {"grpo-overview.json": overview(limits)}


@cache
def _panel_ids() -> dict[str, int]:
    """Overview panel title -> id, from the panel definitions once (nothing rendered or laid out).

    Which panels there are and their order do not depend on the thresholds (`limits` changes what a
    panel draws, not which panels exist), so the ids hold for the dashboard of any `RuleSettings`.
    """
    ids: dict[str, int] = {}
    for _, _, panels in _numbered(_rows(RuleSettings())):
        for pid, panel in panels:
            if panel.title in ids:  # an alert's link names its panel by title
                raise RuntimeError(f"two overview panels are titled {panel.title!r}")
            ids[panel.title] = pid
    return ids


def panel_id(title: str) -> int:
    """The id of the overview panel with this title (alerts link to it); KeyError if none."""
    try:
        return _panel_ids()[title]
    except KeyError:
        raise KeyError(f"no overview panel titled {title!r}") from None


def render_json(dashboard: dict) -> str:
    """The committed form: stable key order, two-space indent, trailing newline."""
    return json.dumps(dashboard, indent=2) + "\n"


def dashboard_files(limits: RuleSettings | None = None) -> dict[str, str]:
    """Committed dashboard files by repository path."""
    return {f"grafana/dashboards/{name}": render_json(d) for name, d in dashboards(limits).items()}


__all__ = ["UID", "dashboard_files", "dashboards", "overview", "panel_id", "render_json"]
