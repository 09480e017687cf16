"""`logged_step`: one exported step standing for the steps since the last one (TRL's logging_steps)."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import points


def test_steps_counter_advances_by_the_steps_each_logged_step_covers(captured):
    for step in (4, 8, 10):
        with captured.tel.logged_step(step) as s:
            s.record({"kl": 0.1})
            s.samples([{"reward": 1.0, "completion": f"c{step}"}])
    metrics = captured.metrics()
    (steps,) = points(metrics["grpo.steps"]).values()
    assert steps.value == 7  # 1 for the first call (a resumed run must not jump), then 4 and 2
    (last,) = points(metrics["grpo.step_index"]).values()
    assert last.value == 10
    events = [e for sp in captured.spans("grpo.samples") for e in sp.events]
    assert sorted(e.attributes["completion"] for e in events) == ["c10", "c4", "c8"]


def test_a_bad_step_or_metrics_argument_is_refused_and_changes_nothing(captured):
    captured.tel.log_metrics(np.int64(4), {"kl": 0.1})  # any integer type
    for step in (-1, 2**63, 5.0, "6", True, None):
        with pytest.raises(ValueError, match=r"^step is .*, not an integer in 0 \.\. 2\*\*63 - 1$"):
            captured.tel.log_metrics(step, {"kl": 9.0})
        with pytest.raises(ValueError, match=r"^step is "):
            with captured.tel.step(step):
                pass
    with pytest.raises(ValueError, match="^metrics: expected a mapping of names to numbers, got list$"):
        captured.tel.log_metrics(7, [("kl", 9.0)])
    # a name that is no string failed on the telemetry thread: the step was neither exported nor spilled
    with pytest.raises(ValueError, match=r"^metrics: names must be strings, got the key 0 \(int\)$"):
        captured.tel.log_metrics(7, {"kl": 9.0, 0: 0.5})
    captured.tel.log_metrics(8, {"kl": 0.2})
    metrics = captured.metrics()
    (steps,) = points(metrics["grpo.steps"]).values()
    assert steps.value == 5  # 1 for step 4, then 4: no refused call counted a step
    assert sorted(sp.attributes["grpo.step"] for sp in captured.spans("grpo.step")) == [4, 8]


def test_a_bad_flush_timeout_is_refused_by_name_and_changes_nothing(captured):
    """It raised TypeError for a string and quietly returned False (flushed nothing) for -1 or NaN."""
    with captured.tel.step(1) as s:
        s.record({"kl": 0.1})
    for timeout_s in ("x", -1, float("nan"), float("inf"), True, [5]):
        with pytest.raises(ValueError, match="^timeout_s: expected seconds, a finite number >= 0, got "):
            captured.tel.flush(timeout_s)
    assert captured.tel.flush(np.float32(10.0))  # any number type
    assert [sp.attributes["grpo.step"] for sp in captured.spans("grpo.step")] == [1]


def test_a_name_that_is_no_string_is_refused_where_it_is_recorded(captured):
    """It failed on the telemetry thread, which lost the whole step: neither exported nor spilled."""
    with captured.tel.step(3) as s:
        with pytest.raises(ValueError, match=r"^stats: names must be strings, got the key \('kl',\) \(tuple\)$"):
            s.record({("kl",): 9.0})
        s.record({"reward": 0.5})
    (span,) = captured.spans("grpo.step")
    assert span.attributes["grpo.step"] == 3 and span.attributes["grpo.metric.reward"] == 0.5


def test_log_interval_is_the_wall_time_between_the_last_two_reported_steps(captured):
    """What the stall alert waits for: a trainer reporting every N steps moves the step index once per N
    step times, however short each step's own `step_time`."""
    import time

    before = time.monotonic()
    with captured.tel.logged_step(10) as s:
        s.record({"step_time": 0.01})
    time.sleep(0.6)
    with captured.tel.logged_step(20) as s:
        s.record({"step_time": 0.01})
    metrics = captured.metrics()  # a record without its own end is stamped when emitted, up to this flush
    between = time.monotonic() - before
    (interval,) = points(metrics["grpo.log_interval"]).values()
    (step_time,) = points(metrics["grpo.step_time"]).values()
    # the wall clock (the trainer's, what the alerts compare with time()) may run a little apart from monotonic
    assert 0.6 <= interval.value <= between + 0.05 and step_time.value == 0.01
    assert interval.attributes == {"run_id": "test-run"}


def test_an_evaluation_counts_no_step_and_leaves_the_step_index(captured):
    """transformers' `eval_on_start` (verl's `val_before_train`) logs at step 0 before any training step: its values
    go out, but the run has no first step yet (GRPONoFirstStep) and the step count stays the trainer's."""
    tel = captured.tel
    tel.log_metrics(0, {"eval_reward": 0.5, "epoch": 0.0}, source="trl", evaluation=True)
    metrics = captured.metrics()
    assert "grpo.step_index" not in metrics and "grpo.steps" not in metrics and "grpo.log_interval" not in metrics
    assert {p.attributes["metric"]: p.value for p in metrics["grpo.eval"].data.data_points} == {"reward": 0.5}
    for step in (10, 20):
        with tel.logged_step(step) as s:
            s.record({"kl": 0.1})
        tel.log_metrics(step, {"eval_reward": step / 100}, source="trl", evaluation=True)  # after the step's log
    with tel.logged_step(25, evaluation=True) as s:  # an evaluation of its own, between two logged steps
        s.record({"eval_metric/reward": 0.9})
    metrics = captured.metrics()
    (steps,) = points(metrics["grpo.steps"]).values()
    assert steps.value == 11  # 1 for the first logged step (step 10), then 10: the evaluations count nothing
    (last,) = points(metrics["grpo.step_index"]).values()
    assert last.value == 20
    assert {p.attributes["metric"]: p.value for p in metrics["grpo.eval"].data.data_points} == {"reward": 0.9}
    assert sorted(sp.attributes["grpo.step"] for sp in captured.spans("grpo.step")) == [0, 10, 10, 20, 20, 25]
    with pytest.raises(ValueError, match="^evaluation must be True or False, got 'yes'$"):
        tel.log_metrics(30, {"eval_reward": 1.0}, source="trl", evaluation="yes")


def test_a_new_attempts_steps_count_as_step_does(captured):
    """After `new_attempt()` (a resume from step 4's checkpoint in this process) `step()` counted the steps run
    again and `log_metrics` did not: it counted from the failed attempt's step 8, so steps 5-8 added nothing and
    the run's step rate read as a stall. Each attempt counts its own steps."""
    tel = captured.tel
    for step in (2, 4, 6, 8):
        tel.log_metrics(step, {"kl": 0.1})
    tel.new_attempt()
    for step in (6, 8, 10):
        tel.log_metrics(step, {"kl": 0.2})
    tel.log_metrics(4, {"kl": 0.3}, source="trl", evaluation=True)
    (steps,) = points(captured.metrics()["grpo.steps"]).values()
    assert steps.value == 1 + 2 + 2 + 2 + 1 + 2 + 2  # the first attempt's 7; the resumed one's first counts 1
