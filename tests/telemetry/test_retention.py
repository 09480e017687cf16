"""Adaptive retention: which steps are anomalous, the run's row budget, and whole steps in the spill."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest

from otel_grpo.catalog import STEP_THRESHOLDS
from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.telemetry._retention import AnomalyJudge, RowBudget


def _judge(**kw) -> AnomalyJudge:
    return AnomalyJudge(TelemetrySettings(run_id="r", **kw))


def _run(judge, kls, rewards=None):
    """The verdict of each step, given its KL (and reward)."""
    rewards = rewards or [0.5] * len(kls)
    return [judge([{"kl": kl, "reward": r}], False) for kl, r in zip(kls, rewards)]


def test_thresholds_non_finite_values_and_skipped_updates():
    judge = _judge()
    assert judge([{"kl": 0.5, "mismatch_kl": 0.001}], False) is None
    assert judge([{"kl": 1.5}], False) == "kl 1.5 above 1"
    assert judge([{"actor/kl_loss": 2.0}], False) == "kl 2 above 1"  # verl's name for it
    assert judge([{"mismatch_k3_kl": 0.02}], False) == "mismatch_k3_kl 0.02 above 0.01"  # the alert's estimator
    assert judge([{"mismatch_kl": 0.02}], False) is None
    assert judge([{"loss": math.nan}], False) == "loss not finite"
    assert judge([{}], True) == "update skipped"
    assert judge([{"loss": math.inf}, {"kl": 3.0}], True) == "update skipped; loss not finite; kl 3 above 1"


def test_trls_kl_is_judged_as_kl_where_the_step_has_no_grpo_kl():
    """As the alerts count it (the `kl` step check's fallback): TRL's logged kl keeps a step whole, unless
    the step also has our plain k3, which alone is judged."""
    judge = _judge()
    assert judge([{"trl_kl": 1.5}], False) == "kl 1.5 above 1"
    assert judge([{"grpo.trl.kl": 2.0}], False) == "kl 2 above 1"
    assert judge([{"kl": 0.5, "trl_kl": 5.0}], False) is None
    assert judge([{"trl_kl": 0.5}, {"kl": 1.5}], False) == "kl 1.5 above 1"
    assert judge([{"trl_kl": 3.0, "beta": 0.0}], False) is None  # beta = 0: no KL alert, no KL anomaly


def test_kl_and_reward_outliers_against_the_run_s_own_recent_steps():
    judge = _judge(anomaly_window=10)
    calm = [1e-3 * (1 + 0.1 * (i % 3)) for i in range(10)]
    assert _run(judge, calm) == [None] * 10
    # KL x50 is below the threshold of 1 but far outside the run's last 10 steps (log scale)
    assert _run(judge, [0.05])[0].startswith("kl outlier (z +")
    assert _run(judge, [1e-5]) == [None]  # a KL drop is no anomaly
    rewards = [0.50, 0.52, 0.49, 0.51, 0.50, 0.48, 0.52, 0.50, 0.49, 0.51]
    fresh = _judge(anomaly_window=10)
    assert _run(fresh, [1e-3] * 10, rewards) == [None] * 10
    assert _run(fresh, [1e-3], [0.0])[0].startswith("reward outlier (z -")  # a collapse, either side


def test_too_little_history_and_a_constant_history_trigger_nothing():
    judge = _judge()
    assert _run(judge, [1e-3, 0.5, 1e-3, 1e-3]) == [None] * 4  # fewer than 5 steps: no outlier test
    const = _judge()
    assert _run(const, [0.01] * 20 + [0.0102]) == [None] * 21  # MAD 0: the relative floor, not 1 ulp


def test_disabled_and_configured_from_the_environment(monkeypatch):
    assert _judge(keep_anomalous_steps=False)([{"kl": 9.0}], True) is None
    monkeypatch.setenv("OTEL_GRPO_ANOMALY_THRESHOLDS", "kl=5, grad_norm=100")
    settings = TelemetrySettings(run_id="r")
    assert settings.anomaly_thresholds == {"kl": 5.0, "grad_norm": 100.0}
    assert AnomalyJudge(settings)([{"kl": 2.0, "grad_norm": 101.0}], False) == "grad_norm 101 above 100"


@pytest.mark.parametrize("value, message", [({"klx": 1.0}, "'klx' is not a catalog key"),
                                            ({"kl": math.inf}, "kl=inf is not a finite number")])
def test_bad_thresholds_name_the_setting(value, message):
    with pytest.raises(ValueError, match="anomaly_thresholds") as err:
        TelemetrySettings(run_id="r", anomaly_thresholds=value)
    assert message in str(err.value)


def test_default_thresholds_are_the_alert_rules_defaults():
    from otel_grpo.stack import RuleSettings

    rules = RuleSettings()
    assert TelemetrySettings(run_id="r").anomaly_thresholds == {
        STEP_THRESHOLDS[name]: getattr(rules, name) for name in ("kl_threshold", "mismatch_kl_threshold")}


RULES = """\
ess_min: 0.5
overrides:
  wide: {kl_threshold: 2.0}
  kl-off: {kl_threshold: .inf}
"""


def _rules(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(RULES)
    return path


def test_a_run_is_judged_by_its_own_alert_thresholds_from_the_rule_settings(tmp_path, monkeypatch):
    """The file `otel-grpo dashboards --rule-settings` takes: the stack reads it, and so does the run."""
    from otel_grpo.stack import RuleSettings

    path = _rules(tmp_path)
    assert RuleSettings.from_yaml(path).overrides["wide"] == {"kl_threshold": 2.0}  # a file the stack accepts
    wide = TelemetrySettings(run_id="wide", rule_settings=path)
    assert wide.anomaly_thresholds == {"kl": 2.0, "mismatch_k3_kl": 0.01, "rollout_is_eff_sample_size": 0.5}
    assert AnomalyJudge(wide)([{"kl": 1.5}], False) is None
    assert AnomalyJudge(wide)([{"kl": 2.5}], False) == "kl 2.5 above 2"
    monkeypatch.setenv("OTEL_GRPO_RULE_SETTINGS", str(path))  # the same file, given as the stack's variable
    other = AnomalyJudge(TelemetrySettings(run_id="other"))
    assert other([{"kl": 1.5}], False) == "kl 1.5 above 1"  # no override: the default
    # ESS is anomalous below its bound, as the alert counts it
    assert other([{"rollout_is_eff_sample_size": 0.9}], False) is None
    assert other([{"rollout_is_eff_sample_size": 0.3}], False) == "rollout_is_eff_sample_size 0.3 below 0.5"
    off = AnomalyJudge(TelemetrySettings(run_id="kl-off"))
    assert off([{"kl": 9.0}], False) is None  # +inf: the run's KL alerts are off


def test_the_training_process_reads_the_rule_settings_without_the_stack(tmp_path):
    """Layers: telemetry reads the file through the catalog, never by importing the stack (or its generation side)."""
    code = ("import sys; from otel_grpo.telemetry import TelemetrySettings; "
            f"s = TelemetrySettings(run_id='wide', rule_settings={str(_rules(tmp_path))!r}); "
            "assert s.anomaly_thresholds['kl'] == 2.0, s.anomaly_thresholds; "
            "print(sorted(m for m in sys.modules if m.startswith(('otel_grpo.stack', 'otel_grpo.generate'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.strip() == "[]"


def test_beta_zero_turns_the_kl_checks_off_as_the_alerts_do():
    judge = _judge(anomaly_window=10)
    assert _run(judge, [1e-3] * 10) == [None] * 10
    assert judge([{"kl": 1.5, "beta": 0.0}], False) is None  # neither the threshold nor the outlier test
    assert judge([{"kl": 1.5}], False) is None  # beta is remembered until the run records another
    assert judge([{"kl": 3.0, "mismatch_k3_kl": 0.5}], False) == "mismatch_k3_kl 0.5 above 0.01"
    assert judge([{"beta": 0.04, "kl": 1.5}], False).startswith("kl 1.5 above 1")


@pytest.mark.parametrize("run_id, scalars, whole", [
    ("default", {}, True),  # KL 1.5 is above the default bound of 1
    ("wide", {}, False),  # the run's KL alert bound is 2.0
    ("beta-zero", {"beta": 0.0}, False),  # KL is not optimised: no KL alert, no KL anomaly
])
def test_a_kl_step_is_kept_whole_by_the_run_s_effective_bound(tmp_path, run_id, scalars, whole):
    out = tmp_path / run_id
    settings = TelemetrySettings(run_id=run_id, output_dir=out, metrics_exporters=["none"], traces_exporters=["none"],
                                 top_k=2, bottom_k=2, random_k=1, seed=0, rule_settings=_rules(tmp_path))
    tel = Telemetry(settings)
    for step in range(4):  # fewer than 5 steps: no outlier test, only the thresholds
        with tel.step(step) as s:
            s.record({"kl": 1.5 if step == 2 else 1e-3, "reward": 0.5, **scalars})
            s.samples([{"prompt": "p", "completion": f"{step}-{i}", "reward": i / 32} for i in range(32)])
    tel.finish()
    kept = [json.loads(x) for x in (out / "samples" / "step_2.jsonl").read_text().splitlines()]
    assert len(kept) == (32 if whole else 5)
    if whole:
        assert {r["kept_because"] for r in kept} == {"kl 1.5 above 1"}


@pytest.mark.parametrize("text, message", [("- a list", "expected a mapping"), ("kl_threshold: high", "is not a number"),
                                           ("overrides: {r: {kl_threshold: [1]}}", "is not a number")])
def test_a_bad_rule_settings_file_is_one_line_naming_it(tmp_path, monkeypatch, text, message):
    path = tmp_path / "rules.yml"
    path.write_text(text)
    monkeypatch.setenv("OTEL_GRPO_RULE_SETTINGS", str(path))
    with pytest.raises(ValueError) as err:
        TelemetrySettings(run_id="r")
    assert message in str(err.value) and "rule_settings" in str(err.value).lower() and "\n" not in str(err.value)
    monkeypatch.setenv("OTEL_GRPO_RULE_SETTINGS", str(tmp_path / "missing.yml"))
    with pytest.raises(ValueError, match="OTEL_GRPO_RULE_SETTINGS=.*missing.yml"):
        TelemetrySettings(run_id="r")


def test_budget_admits_whole_steps_until_spent_then_says_so_once(caplog):
    budget = RowBudget(TelemetrySettings(run_id="r", anomaly_rows_budget=20))
    caplog.set_level(logging.WARNING)
    assert [budget.admit(n) for n in (8, 8, 8, 4, 8)] == [True, True, False, True, False]
    assert budget.left == 0
    assert sum("anomaly_rows_budget" in r.getMessage() for r in caplog.records) == 1


def test_an_anomalous_step_is_spilled_whole_within_the_budget(tmp_path):
    settings = TelemetrySettings(run_id="keep", output_dir=tmp_path, metrics_exporters=["none"],
                                 traces_exporters=["none"], top_k=2, bottom_k=2, random_k=1, seed=0,
                                 anomaly_rows_budget=40)
    tel = Telemetry(settings)
    for step in range(12):
        with tel.step(step) as s:
            s.record({"kl": 3.0 if step in (8, 10) else 1e-3, "reward": 0.5})
            s.samples([{"prompt": "p", "completion": f"{step}-{i}", "reward": i / 32} for i in range(32)])
    tel.finish()

    def spilled(step):
        return [json.loads(x) for x in (tmp_path / "samples" / f"step_{step}.jsonl").read_text().splitlines()]

    assert len(spilled(7)) == 5
    whole = spilled(8)
    assert len(whole) == 32 and [r["sample_index"] for r in whole] == list(range(32))
    reasons = {r["kept_because"] for r in whole}
    assert {r["selection"] for r in whole} == {"all"} and len(reasons) == 1
    assert reasons.pop().startswith("kl 3 above 1; kl outlier (z +")
    assert len(spilled(10)) == 5  # the budget of 40 rows is spent: the usual selection
    assert "kept_because" not in spilled(10)[0]


def test_the_judge_never_raises_into_the_training_loop(caplog):
    caplog.set_level(logging.WARNING)
    judge = _judge()
    assert judge([None], False) is None and judge([None], False) is None  # a malformed record: no verdict
    assert sum("retention failed" in r.getMessage() for r in caplog.records) == 1
    assert judge([{"kl": 2.0}], False) == "kl 2 above 1"  # and it goes on
