"""An evaluation's value of a training statistic is the evaluation's: `grpo.eval{metric=...}`, never the training series.

`log_metrics(step, {"reward": x}, evaluation=True)` goes out exactly as `{"eval_reward": x}` does: on the gauges,
in the step span the sidecar stores, in the spill, and to the step checks; the step's training value stays
current. Over both sinks (`captured`) and the pull endpoint; the sidecar's step row: tests/sidecar.
"""

from __future__ import annotations

import urllib.request

import pytest
import torch

from otel_grpo import signals
from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.telemetry._spill import SpillReader

from .conftest import points


def _current(captured, name: str, label: str | None = None) -> dict:
    """The data points of `name` now, by `label`'s value (None: unlabelled); {} where it has none."""
    metric = captured.metrics().get(name)
    return {p.attributes.get(label) if label else None: p.value for p in metric.data.data_points} if metric else {}


def test_an_evaluations_plain_keys_leave_the_steps_training_values_current(captured):
    tel = captured.tel
    tel.log_metrics(1, {"reward": 0.5, "kl": 0.1, "rewards/fmt/mean": 0.25, "epoch": 0.5})
    tel.log_metrics(1, {"reward": 0.9, "kl": 0.3, "rewards/fmt/mean": 1.0, "epoch": 1.0}, evaluation=True)
    assert _current(captured, "grpo.reward.mean") == {None: 0.5}
    assert _current(captured, "grpo.kl") == {None: 0.1}
    assert _current(captured, "grpo.reward_fn.mean", "reward_fn") == {"fmt": 0.25}
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.9, "kl": 0.3, "rewards/fmt/mean": 1.0}
    assert _current(captured, "grpo.epoch") == {None: 1.0}  # the trainer's state, logged beside eval metrics
    tel.log_metrics(2, {"reward": 0.6})  # the next training step: the evaluation's values stay current
    assert _current(captured, "grpo.reward.mean") == {None: 0.6}
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.9, "kl": 0.3, "rewards/fmt/mean": 1.0}


def test_a_plain_key_in_an_evaluation_goes_out_as_its_eval_key(captured):
    """The step span (what the sidecar stores as the step's row) and the spill carry the evaluation's value under
    `eval_metric/<name>`, as `eval_<name>` puts it; the training record's span keeps the training value."""
    tel = captured.tel
    tel.log_metrics(1, {"reward": 0.5})
    tel.log_metrics(1, {"reward": 0.9, "loss": 2.0}, evaluation=True)
    tel.log_metrics(1, {"eval_reward": 0.9, "eval_loss": 2.0}, evaluation=True)
    first, plain, prefixed = (dict(s.attributes) for s in captured.spans("grpo.step"))
    assert first["grpo.metric.reward"] == 0.5
    assert {k: v for k, v in plain.items() if k.startswith("grpo.metric.")} == {
        "grpo.metric.eval_metric/reward": 0.9, "grpo.metric.eval_metric/loss": 2.0}
    assert plain == prefixed
    tel.shutdown()
    lines = SpillReader(captured.output_dir).step_lines(1)["test-run"]
    evaluated = {"eval_metric/reward": 0.9, "eval_metric/loss": 2.0}
    assert [line["metrics"] for line in lines] == [{"reward": 0.5}, evaluated, evaluated]


def test_an_evaluations_kl_is_no_step_for_the_step_checks(captured):
    """The KL alerts count training steps: an evaluation's KL far beyond every bound is judged at no step (not
    at the next training step either, when that one logs no KL of its own)."""
    tel = captured.tel
    tel.log_metrics(1, {"kl": 0.01})
    tel.log_metrics(1, {"kl": 50.0}, evaluation=True)
    tel.log_metrics(2, {"loss": 0.5})
    streaks = [p.value for p in points(captured.metrics()["grpo.step.streak"]).values()
               if p.attributes["signal"] == "kl"]
    assert streaks and set(streaks) == {0.0}
    beyond = [p.value for p in points(captured.metrics()["grpo.step.beyond"]).values()
              if p.attributes["signal"] == "kl"]
    assert beyond and set(beyond) == {0}


def test_an_evaluations_per_sample_values_stay_out_of_the_training_histograms(captured):
    """`grpo.sample.*` are the training completions' distributions: an evaluation's per-sample vectors are not
    recorded; its scalars are `grpo.eval`."""
    tel = captured.tel
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0])
    with tel.logged_step(1, evaluation=True) as s:
        s.record(signals.reduce_stats(signals.reward_stats(rewards, group_size=4)))
    assert "grpo.sample.reward" not in captured.metrics()
    assert _current(captured, "grpo.eval", "metric")["reward"] == 0.75
    with tel.step(2) as s:
        s.record(signals.reduce_stats(signals.reward_stats(rewards, group_size=4)))
    (histogram,) = points(captured.metrics()["grpo.sample.reward"]).values()
    assert histogram.count == 4


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_the_pull_endpoint_serves_the_training_reward_and_the_evaluations(tmp_path, emit_in):
    settings = TelemetrySettings(run_id="evaluated", metrics_exporters=["prometheus"], traces_exporters=["none"],
                                 prometheus_port=0, output_dir=tmp_path, emit_in=emit_in)
    tel = Telemetry(settings)
    try:
        tel.log_metrics(1, {"reward": 0.5})
        tel.log_metrics(1, {"reward": 0.9}, evaluation=True)
        assert tel.flush(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        tel.shutdown()
    served = {line.split("{")[0] + ("/" + line.split('metric="')[1].split('"')[0] if 'metric="' in line else ""):
              line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(("grpo_reward_mean{", "grpo_eval{"))}
    assert served == {"grpo_reward_mean": "0.5", "grpo_eval/reward": "0.9"}


def test_an_evaluations_unknown_keys_and_step_leave_the_training_run_as_it_was(captured):
    """An evaluation's key the catalog does not know overwrote the training value of that `grpo.extra.*` gauge
    (and the step row's column); its `step` (or verl's `training/global_step`) moved `grpo.step_index`, back or
    before the first step. The unknown key is the evaluation's metric; the step index moves with training only."""
    tel = captured.tel
    tel.log_metrics(0, {"training/global_step": 0, "val-core/acc": 0.4}, source="verl", evaluation=True)
    assert _current(captured, "grpo.step_index") == {}  # no step yet: GRPONoFirstStep still judges the run
    tel.log_metrics(2, {"my_metric": 2.0, "reward": 0.6})
    tel.log_metrics(2, {"my_metric": 99.0, "step": 9, "training/global_step": 1}, evaluation=True)
    assert _current(captured, "grpo.extra.my_metric") == {None: 2.0}
    assert _current(captured, "grpo.step_index") == {None: 2.0}
    assert _current(captured, "grpo.eval", "metric") == {"my_metric": 99.0}


def test_an_evaluation_in_a_peers_names_is_the_metric_of_the_name_as_logged(captured):
    """With a `source`, an evaluation's plain names went through the peer's training meanings first: TRL's `kl`
    became `grpo.eval{metric="trl_kl"}` and `rewards/acc/mean` `{metric="reward_fn_mean/acc"}`, beside the
    `{metric="kl"}` its `eval_kl` gives. The name as logged is the metric, whichever of the two was logged."""
    tel = captured.tel
    tel.log_metrics(4, {"kl": 0.2, "rewards/acc/mean": 0.9, "epoch": 1.0}, source="trl", evaluation=True)
    assert _current(captured, "grpo.eval", "metric") == {"kl": 0.2, "rewards/acc/mean": 0.9}
    tel.log_metrics(8, {"eval_kl": 0.3, "eval_rewards/acc/mean": 0.8}, source="trl", evaluation=True)
    assert _current(captured, "grpo.eval", "metric") == {"kl": 0.3, "rewards/acc/mean": 0.8}
    tel.log_metrics(12, {"actor/pg_loss": 0.5, "val-core/acc": 0.7, "training/global_step": 12}, source="verl",
                    evaluation=True)
    assert _current(captured, "grpo.eval", "metric") == {"actor/pg_loss": 0.5, "core/acc": 0.7}
    assert _current(captured, "grpo.epoch") == {None: 1.0} and _current(captured, "grpo.step_index") == {}
