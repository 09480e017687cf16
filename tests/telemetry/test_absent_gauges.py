"""Absent is absent: a per-step gauge has a data point only where the latest step gave it a finite value.

Over both sinks (`captured`): the thread's in-memory reader and the child process's OTLP export to a
real receiver, so "no data point" holds for what an OTLP collection carries. The pull endpoint:
test_prometheus.py. The integrations (TRL, follow, the demo trainer): their own test files.
"""

from __future__ import annotations

import math

import torch

from otel_grpo import signals
from otel_grpo.catalog import STATE_GAUGES, Kind, get


def _current(captured, name: str, label: str | None = None) -> dict:
    """The data points of `name` now, by `label`'s value (None: unlabelled); {} where it has none."""
    metric = captured.metrics().get(name)  # a metric without data points is left out of the collection
    return {p.attributes.get(label) if label else None: p.value for p in metric.data.data_points} if metric else {}


def test_a_statistic_the_latest_step_does_not_log_has_no_data_point(captured):
    """TRL's second-iteration steps (num_iterations > 1) log no reward or length: not the last batch's values."""
    tel = captured.tel
    tel.log_metrics(1, {"kl": 0.1, "reward": 0.5, "rewards/fmt/mean": 0.25, "rewards/acc/mean": 0.75})
    assert _current(captured, "grpo.reward.mean") == {None: 0.5}
    assert _current(captured, "grpo.reward_fn.mean", "reward_fn") == {"fmt": 0.25, "acc": 0.75}
    tel.log_metrics(2, {"kl": 0.2})  # no generation at this step
    assert _current(captured, "grpo.kl") == {None: 0.2}
    assert _current(captured, "grpo.reward.mean") == {}
    assert _current(captured, "grpo.reward_fn.mean", "reward_fn") == {}
    tel.log_metrics(3, {"kl": 0.3, "rewards/acc/mean": 1.0})
    assert _current(captured, "grpo.reward_fn.mean", "reward_fn") == {"acc": 1.0}
    assert _current(captured, "grpo.step_index") == {None: 3.0}


def test_a_statistic_invalid_at_the_latest_step_has_no_data_point(captured):
    """Every completion hit the length limit: the terminated lengths are undefined, not the last step's."""
    mask = torch.ones(4, 8, dtype=torch.bool)
    for step, truncated in enumerate(([False, True, False, True], [True, True, True, True])):
        reduced = signals.reduce_stats(signals.length_stats(mask, torch.tensor(truncated)))
        with captured.tel.step(step) as s:
            s.record(reduced)
        if step == 0:
            assert _current(captured, "grpo.completion.terminated_length.mean") == {None: 8.0}
    assert "terminated_length_mean" in reduced.invalid
    assert _current(captured, "grpo.completion.terminated_length.mean") == {}
    assert _current(captured, "grpo.completion.terminated_length.max") == {}
    assert _current(captured, "grpo.completion.clipped_ratio") == {None: 1.0}


def test_a_reward_function_that_returned_none_has_no_data_point(captured):
    """TRL logs None (NaN) for a reward function with no value at a step: counted, and no data point, even
    where an earlier record of that step gave one."""
    tel = captured.tel
    tel.log_metrics(1, {"rewards/fmt/mean": 0.5, "rewards/acc/mean": 0.25})
    tel.log_metrics(2, {"rewards/fmt/mean": math.nan, "rewards/acc/mean": 0.75})
    assert _current(captured, "grpo.reward_fn.mean", "reward_fn") == {"acc": 0.75}
    with tel.step(3) as s:
        s.record({"rewards/fmt/mean": 1.0, "rewards/acc/mean": 1.0})
        s.record({"rewards/fmt/mean": None, "rewards/acc/mean": math.nan})  # None is not a number: dropped
    assert _current(captured, "grpo.reward_fn.mean", "reward_fn") == {"fmt": 1.0}
    assert _current(captured, "grpo.nonfinite", "signal") == {"reward_fn_mean/fmt": 1, "reward_fn_mean/acc": 1,
                                                            "loss": 0, "grad_norm": 0}  # these two: from the start


def test_several_records_of_one_step_are_its_values(captured):
    """A summary log at the last logged step, an evaluation, a late record of an earlier step: none of them
    makes the latest step's values stale. A later step does, whatever it records."""
    tel = captured.tel
    tel.log_metrics(4, {"kl": 0.4, "my_metric": 2.0})
    tel.log_metrics(4, {"train_runtime": 12.0})  # transformers' summary, at the same step
    tel.log_metrics(4, {"eval_reward": 0.9}, source="trl", evaluation=True)
    tel.log_metrics(1, {"learning_rate": 1e-5})  # a late record of an earlier step: no gauge of the latest's
    assert _current(captured, "grpo.kl") == {None: 0.4}
    assert _current(captured, "grpo.extra.my_metric") == {None: 2.0}
    assert _current(captured, "grpo.train.runtime") == {None: 12.0}
    assert _current(captured, "grpo.learning_rate") == {}
    with tel.step(5) as s:  # a step that records no statistic (the demo trainer's failed batch): none current
        with s.phase("rollout"):
            pass
        s.skip()
    for name in ("grpo.kl", "grpo.extra.my_metric", "grpo.train.runtime", "grpo.learning_rate"):
        assert _current(captured, name) == {}, name
    assert _current(captured, "grpo.step_index") == {None: 5.0}
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.9}  # an evaluation's: until the next one


def test_an_evaluation_and_the_training_steps_are_two_sets(captured):
    """An evaluation's values are current until the next evaluation (training steps in between do not end
    them); a metric the next evaluation does not report has no data point."""
    tel = captured.tel
    tel.log_metrics(2, {"eval_reward": 0.5, "eval_loss": 1.0}, source="trl", evaluation=True)
    tel.log_metrics(3, {"kl": 0.3})
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.5, "loss": 1.0}
    tel.log_metrics(4, {"eval_reward": 0.75}, source="trl", evaluation=True)
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.75}
    assert _current(captured, "grpo.kl") == {None: 0.3}


def test_state_gauges_keep_their_value_when_a_step_reports_nothing_of_theirs(captured):
    """The step index, the process's start, the streaks and the run-end markers are not per-step statistics:
    the alerts read them at any step."""
    tel = captured.tel
    tel.log_metrics(1, {"mismatch_chi2_token": 5.0})  # beyond every bound of its step check: streaks of 1
    tel.log_metrics(2, {"loss": 0.5})  # none at this step: its streaks stay where they were
    assert _current(captured, "grpo.mismatch.chi2_token") == {}
    streaks = _current(captured, "grpo.step.streak", "signal")
    assert streaks and set(streaks) == {"mismatch_chi2_token"} and set(streaks.values()) == {1.0}
    assert _current(captured, "grpo.step_index") == {None: 2.0}
    assert _current(captured, "grpo.run.finished") == {None: 0.0}
    assert len(_current(captured, "grpo.process.start_time")) == 1
    tel.finish()
    assert _current(captured, "grpo.run.finished") == {None: 1.0}
    assert _current(captured, get("loss").name) == {None: 0.5}  # the last step's values stay current


def test_state_gauges_are_catalog_gauges():
    assert STATE_GAUGES and all(get(key).kind is Kind.GAUGE for key in STATE_GAUGES)


def test_a_number_no_float_holds_is_dropped_and_never_reaches_the_loop(captured):
    """An int beyond a float's range (10**400) in `log_metrics` or `Step.record` raised OverflowError into the
    training loop and counted the step as skipped; it is dropped, as TRL's logs drop it, and the rest recorded."""
    tel = captured.tel
    tel.log_metrics(1, {"kl": 0.1, "num_tokens": 10**400})
    with tel.step(2) as s:
        s.record({"reward": 1.0}, big=10**400)
    assert _current(captured, "grpo.reward.mean") == {None: 1.0}
    assert _current(captured, "grpo.skipped_steps") in ({}, {None: 0})
    assert _current(captured, "grpo.step_index") == {None: 2.0}


def test_the_step_index_is_the_latest_step_of_the_newest_attempt(captured):
    """A late record of an earlier step moved `grpo.step_index` back to it; a resume in this process
    (`new_attempt`) still starts it again from the checkpoint's step."""
    tel = captured.tel
    for step in range(4):
        tel.log_metrics(step, {"kl": 0.1})
    tel.log_metrics(1, {"reward": 0.9})  # a metric of step 1 logged late
    assert _current(captured, "grpo.step_index") == {None: 3.0}
    tel.new_attempt()
    tel.log_metrics(2, {"kl": 0.2})  # resumed from step 1's checkpoint
    assert _current(captured, "grpo.step_index") == {None: 2.0}


def test_a_late_record_changes_nothing_the_latest_step_gave(captured):
    """A late record of an earlier step (a re-sent log, a callback that reports behind) set its values over the
    latest step's: `grpo.kl` showed step 1's 0.111 after step 3's 0.3, and a late NaN removed the latest reward.
    It sets no gauge: what the latest step lacks stays without a data point."""
    tel = captured.tel
    for step, kl in ((1, 0.1), (2, 0.2), (3, 0.3)):
        tel.log_metrics(step, {"kl": kl, "reward": 0.5})
    tel.log_metrics(1, {"kl": 0.111, "reward": math.nan, "learning_rate": 1e-5})
    assert _current(captured, "grpo.kl") == {None: 0.3}
    assert _current(captured, "grpo.reward.mean") == {None: 0.5}
    assert _current(captured, "grpo.learning_rate") == {}  # step 3 did not log it
    tel.log_metrics(3, {"kl": 0.33})  # another record of the latest step is its value
    assert _current(captured, "grpo.kl") == {None: 0.33}


def test_a_new_attempt_ends_the_failed_attempts_evaluation(captured):
    """After `new_attempt()` (a resume in this process) the failed attempt's evaluation stayed current beside
    the new attempt's steps."""
    tel = captured.tel
    for step in range(6):
        tel.log_metrics(step, {"kl": 0.1})
    tel.log_metrics(5, {"eval_reward": 0.9, "eval_loss": 2.0}, source="trl", evaluation=True)
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.9, "loss": 2.0}
    tel.new_attempt()
    tel.log_metrics(3, {"kl": 0.33})
    assert _current(captured, "grpo.eval", "metric") == {}
    assert _current(captured, "grpo.kl") == {None: 0.33}


def test_a_validation_on_a_training_steps_line_is_the_latest_evaluation_until_the_next(captured):
    """verl logs a validation (`test_freq`) on its training step's line: that record is a training step's, and its
    `grpo.eval` points ended at the next training step, so a dashboard's latest validation went blank between
    validations. A value's set is its gauge's: the validation stays until the next evaluation replaces it."""
    tel = captured.tel
    tel.log_metrics(10, {"actor/pg_loss": 0.1, "val-core/gsm8k/acc/mean@1": 0.4, "val-aux/num_turns/mean": 2.0},
                    source="verl")
    tel.log_metrics(11, {"actor/pg_loss": 0.2}, source="verl")
    assert _current(captured, "grpo.eval", "metric") == {"core/gsm8k/acc/mean@1": 0.4, "aux/num_turns/mean": 2.0}
    assert _current(captured, "grpo.loss.policy") == {None: 0.2}
    tel.log_metrics(20, {"actor/pg_loss": 0.3, "val-core/gsm8k/acc/mean@1": 0.5}, source="verl")
    assert _current(captured, "grpo.eval", "metric") == {"core/gsm8k/acc/mean@1": 0.5}  # the newer validation's
    tel.log_metrics(12, {"val-aux/num_turns/mean": 3.0}, source="verl", evaluation=True)  # late: not step 20's
    assert _current(captured, "grpo.eval", "metric") == {"core/gsm8k/acc/mean@1": 0.5}


def test_an_evaluations_trainer_state_is_the_training_steps(captured):
    """transformers logs `epoch` beside its `eval_` keys: that is the trainer's state, on the training series, and
    the next training step ends it as it ends the step's own; the evaluation's metrics stay."""
    tel = captured.tel
    tel.log_metrics(4, {"kl": 0.1, "epoch": 0.5}, source="trl")
    tel.log_metrics(4, {"eval_reward": 0.7, "epoch": 0.52}, source="trl", evaluation=True)
    assert _current(captured, "grpo.epoch") == {None: 0.52}
    tel.log_metrics(5, {"kl": 0.2}, source="trl")
    assert _current(captured, "grpo.epoch") == {}
    assert _current(captured, "grpo.eval", "metric") == {"reward": 0.7}


def test_a_late_record_leaves_the_process_state_as_the_latest_step_set_it(captured):
    """verl's lines carry `training/global_step`, the step index's own key: a follower re-sending steps 3-5 after
    a failed export put `grpo.step_index` back at 3 under step 5 (the stall alerts then name the wrong step)."""
    tel = captured.tel
    for step in range(1, 6):
        tel.log_metrics(step, {"actor/pg_loss": 0.1, "training/global_step": step}, source="verl")
    tel.log_metrics(3, {"actor/pg_loss": 0.3, "training/global_step": 3}, source="verl")
    assert _current(captured, "grpo.step_index") == {None: 5}


def test_a_late_record_fills_nothing_the_latest_step_lacks(captured):
    """A follower sends a step's completions (samples only) before the trainer state's scalars of the steps up to
    it: every completion of step 8 was clipped (TRL logs 0 for the terminated lengths, which the mapping drops),
    step 7's were not. Late steps 5-7 filled what step 8 lacked: a terminated length of 3 beside a clipped ratio
    of 1, two steps' numbers served as one. The gauges are step 8's alone."""
    tel = captured.tel

    def logs(step: int, terminated: float) -> dict:
        return {"reward": 1.0 + step, "completions/clipped_ratio": 1.0 if terminated == 0 else 0.5, "loss": 0.1,
                "completions/mean_terminated_length": terminated, "completions/min_terminated_length": terminated}

    with tel.logged_step(8) as s:
        s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
    for step in (5, 6, 7, 8):
        tel.log_metrics(step, logs(step, 0.0 if step == 8 else 3.0), source="trl")
    assert _current(captured, "grpo.completion.clipped_ratio") == {None: 1.0}
    assert _current(captured, "grpo.completion.terminated_length.mean") == {}
    assert _current(captured, "grpo.completion.terminated_length.min") == {}
    assert _current(captured, "grpo.reward.mean") == {None: 9.0}
    with tel.logged_step(3) as s:  # a late record in several parts, a reward the latest step has not logged
        s.record({"my_metric": 0.3})
        s.record({"my_metric": 0.33})
    assert _current(captured, "grpo.extra.my_metric") == {}


def test_an_older_attempts_late_record_sets_nothing(captured):
    """A follower sends what the crashed job's files still hold after the relaunch's first records: its later
    steps' values (a key the relaunch has not logged yet) and its evaluation came back beside the relaunch's."""
    tel = captured.tel
    crashed = tel.attempt
    for step in range(1, 6):
        tel.log_metrics(step, {"kl": 0.1, "my_metric": float(step)})
    relaunch = tel.new_attempt()
    tel.log_metrics(3, {"kl": 0.2})
    with tel.logged_step(5, attempt=crashed) as s:
        s.record({"kl": 0.9, "my_metric": 5.0, "training/global_step": 5})
    with tel.logged_step(5, evaluation=True, attempt=crashed) as s:
        s.record({"eval_reward": 0.9})
    assert relaunch > crashed
    assert _current(captured, "grpo.kl") == {None: 0.2}
    assert _current(captured, "grpo.extra.my_metric") == {}
    assert _current(captured, "grpo.eval", "metric") == {}
    assert _current(captured, "grpo.step_index") == {None: 3}


def test_a_relaunch_that_evaluates_first_makes_the_crashed_attempts_steps_older(captured):
    """A relaunch's first record is often an evaluation (verl's `val_before_train`, transformers' `eval_on_start`);
    a follower then sent the crashed job's later step: the gauges dropped it, but it moved the step index and
    counted a step (and its KL went to the step checks) as if the run were still the crashed attempt."""
    tel = captured.tel
    crashed = tel.attempt
    for step in range(1, 9):
        tel.log_metrics(step, {"actor/pg_loss": 0.1, "training/global_step": step}, source="verl")
    tel.new_attempt()
    tel.log_metrics(5, {"val-core/acc": 0.5}, source="verl", evaluation=True)
    with tel.logged_step(9, attempt=crashed) as s:
        s.record({"actor/pg_loss": 0.9, "training/global_step": 9, "actor/ppo_kl": 5.0})
    assert _current(captured, "grpo.step_index") == {None: 8}
    assert _current(captured, "grpo.steps") == {None: 8}
    assert _current(captured, "grpo.eval", "metric") == {"core/acc": 0.5}
    tel.log_metrics(6, {"actor/pg_loss": 0.2, "training/global_step": 6}, source="verl")  # the relaunch trains
    assert _current(captured, "grpo.step_index") == {None: 6}
    assert _current(captured, "grpo.steps") == {None: 9}


def test_a_state_gauge_set_outside_the_record_being_recorded_takes_its_value():
    """`finish()` whose queue did not drain sets the run's end markers from its own thread while the telemetry
    thread records a late step: the marker was refused as the late record's, and a finished run read as a crash."""
    import threading

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_grpo.telemetry._gauges import LatestValueGauge, StepGauges

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    steps = StepGauges()
    finished = LatestValueGauge(meter, "grpo.run.finished", "1", "", steps, per_step=False)
    steps.begin_record(False, 5)
    steps.end_record()
    steps.begin_record(False, 3)  # the telemetry thread, inside a late record
    closing = threading.Thread(target=finished.set, args=(1.0, {"run_id": "r"}))
    closing.start()
    closing.join()
    finished.set(0.0, {"run_id": "r"})  # the late record's own value of the state: refused
    steps.end_record()
    data = reader.get_metrics_data()
    points = [p.value for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              for p in m.data.data_points]
    assert points == [1.0]
