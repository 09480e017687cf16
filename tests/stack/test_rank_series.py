"""Runs where every rank exports (`export_all_ranks`): the dashboards and recording rules read the run once.

Every rank exports the run's values (reduce_stats hands each the global counts, the gathered per-sample values,
the reduced scalars), each series under its own `rank` and instance. promtool evaluates the committed recording
rules and the dashboard's expressions over a run of two ranks and a run of one, with known values.
"""

from __future__ import annotations

import subprocess

import yaml

from otel_grpo.generate._checks import concrete, dashboard_exprs
from otel_grpo.stack import RuleSettings, recording_rules
from otel_grpo.generate.dashboards import dashboards

# Two ranks of run `ranks` (rank 1's exports 20 s behind rank 0's), and run `solo` of one exporting process (no `rank`).
TARGETS = {
    "ranks0": 'run_id="ranks", rank="0", job="grpo", instance="ranks/rank0"',
    "ranks1": 'run_id="ranks", rank="1", job="grpo", instance="ranks/rank1"',
    "solo": 'run_id="solo", job="grpo", instance="solo"',
}
# Every counter and every histogram's +Inf bucket grows by 1 a second in both runs (15 each 15 s).
COUNTERS = ('grpo_steps_total{%s}', 'grpo_tokens_total{%s}', 'grpo_samples_total{%s}',
            'grpo_nonfinite_total{%s, signal="loss", process="1"}', 'grpo_skipped_steps_total{%s, process="1"}',
            'grpo_sample_reward_bucket{%s, le="+Inf"}', 'grpo_sample_advantage_bucket{%s, le="+Inf"}',
            'grpo_sample_completion_length_bucket{%s, le="+Inf"}', 'grpo_sample_is_ratio_bucket{%s, le="+Inf"}',
            'grpo_step_kl_bucket{%s, le="+Inf"}', 'grpo_phase_duration_seconds_bucket{%s, phase="rollout", le="+Inf"}',
            'grpo_sample_reward_fn_bucket{%s, reward_fn="fmt", le="+Inf"}',
            'grpo_step_beyond_total{%s, signal="kl", bound="1", streak="3", process="1"}')


def _promtool_eval(promtool: str, tmp_path, exprs: list[str], series: list[dict], at: str = "30m") -> str:
    """promtool's output for each expression expected at 1 for each run at `at` (empty: all held)."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(recording_rules(RuleSettings())))
    tests = [{"interval": "15s", "input_series": series, "promql_expr_test": [
        {"expr": e, "eval_time": at, "exp_samples": [{"labels": '{run_id="ranks"}', "value": 1},
                                                      {"labels": '{run_id="solo"}', "value": 1}]} for e in exprs]}]
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                     "tests": tests}))
    out = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    return "" if out.returncode == 0 else out.stdout + out.stderr


def test_rates_count_a_run_once_whatever_its_exporting_ranks(promtool, tmp_path):
    """Issue D1: with two ranks, steps/s read 2.27 for 1 true, tokens/s 227 for 100 (a sum over ranks)."""
    series = [{"series": c % labels, "values": "0+15x160"} for c in COUNTERS for labels in TARGETS.values()]
    d = dashboards()["grpo-overview.json"]
    stack = ("ALERTS", "otelcol", "sidecar", "histogram_quantile")  # the stack's own panels; quantiles, not rates
    rates = sorted({concrete(e, "ranks|solo", "5m") for _, e in dashboard_exprs(d)
                    if ("rate(" in e or ":rate{" in e) and not any(s in e for s in stack + ("phase_duration",))})
    assert len(rates) >= 15  # the counters' panels, the recorded rates, every histogram's observations
    # Each run's every series of each expression at the true rate: its max and its min by run are 1.
    exprs = [f"round({agg} by (run_id) ({e}), 0.001)" for e in rates for agg in ("max", "min")]
    assert _promtool_eval(promtool, tmp_path, exprs, series) == ""


def test_phase_durations_count_every_ranks_own_phases(promtool, tmp_path):
    """Each rank times its own phases (a straggling rank's generation shows): the phase histogram's rate adds the
    ranks' observations, where the run's gathered histograms read rank 0's alone."""
    series = [{"series": c % labels, "values": "0+15x160"} for c in COUNTERS for labels in TARGETS.values()]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(recording_rules(RuleSettings())))
    expr = 'round(sum by (run_id) (run_id_phase_le:grpo_phase_duration_seconds_bucket:rate{le="+Inf"}), 0.001)'
    tests = [{"interval": "15s", "input_series": series, "promql_expr_test": [
        {"expr": expr, "eval_time": "30m", "exp_samples": [{"labels": '{run_id="ranks"}', "value": 2},
                                                           {"labels": '{run_id="solo"}', "value": 1}]}]}]
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                     "tests": tests}))
    out = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
