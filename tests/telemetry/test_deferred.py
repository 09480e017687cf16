"""`Step.defer`: work handed over with the step, recorded off the training thread before the step is emitted."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from . import _deferred
from .conftest import points

ROWS = [{"prompt": "p", "completion": f"c{i}", "reward": float(i)} for i in range(4)]


def _gauge(metrics, name: str) -> float:
    (point,) = points(metrics[name]).values()
    return point.value


def test_a_deferred_recording_goes_out_with_its_step(captured):
    _deferred.RAN_ON.clear()
    with captured.tel.step(3) as s:
        s.record({"grad_norm": 1.5})
        s.defer(_deferred.finish, 0.25, ROWS)
    metrics = captured.metrics()
    assert (_gauge(metrics, "grpo.kl"), _gauge(metrics, "grpo.grad_norm")) == (0.25, 1.5)
    (span,) = captured.spans("grpo.step")
    assert (span.attributes["grpo.metric.entropy"], span.attributes["grpo.metric.reward_std"]) == (0.5, 0.5)
    events = [e for sp in captured.spans("grpo.samples") for e in sp.events]
    assert len(events) == 4 and {e.attributes["group_size"] for e in events} == {2}
    here = [(pid, name) for pid, name in _deferred.RAN_ON if pid == os.getpid()]
    if captured.tel.settings.emit_in == "thread":  # on the telemetry thread, not the caller's
        assert here and threading.main_thread().name not in {name for _, name in here}
    else:  # in the telemetry process
        assert here == []


@pytest.mark.parametrize("emit_in", ["thread"])  # the process sink's warning is on the child's stderr
def test_a_failing_deferred_recording_is_said_once_and_the_step_still_goes_out(captured, caplog):
    with caplog.at_level(logging.WARNING, "otel_grpo.telemetry"):
        for step in (1, 2):
            with captured.tel.step(step) as s:
                s.record({"grad_norm": float(step)})
                s.defer(_deferred.broken, "finishing failed")
        metrics = captured.metrics()
    assert _gauge(metrics, "grpo.grad_norm") == 2.0 and _gauge(metrics, "grpo.kl") == 9.0
    said = [r for r in caplog.records if "deferred" in r.getMessage()]
    assert len(said) == 1 and "broken" in said[0].getMessage()


def test_a_function_the_telemetry_process_cannot_find_is_refused(captured):
    with captured.tel.step(1) as s:
        for fn, why in ((lambda step: None, "<lambda>"), (_local(), "<locals>"), (3, "int")):
            with pytest.raises(ValueError, match=f"^fn: .*{why}"):
                s.defer(fn)


@pytest.mark.parametrize("emit_in", ["process"])
def test_a_function_of_the_training_script_runs_on_the_training_thread_with_the_process_sink(captured, caplog):
    """The child's __main__ is its own: a function defined in the script could not be found there."""
    script = _deferred.finish.__class__(_deferred.finish.__code__, _deferred.finish.__globals__, "finish_here")
    script.__module__, script.__qualname__ = "__main__", "finish_here"
    _deferred.RAN_ON.clear()
    with caplog.at_level(logging.WARNING, "otel_grpo.telemetry"):
        for step in (1, 2):
            with captured.tel.step(step) as s:
                s.defer(script, 0.125, ROWS)
    assert _gauge(captured.metrics(), "grpo.kl") == 0.125
    assert [pid for pid, _ in _deferred.RAN_ON] == [os.getpid()] * 2
    said = [r.getMessage() for r in caplog.records if "__main__" in r.getMessage()]
    assert len(said) == 1 and "finish_here" in said[0]


def _local():
    def inner(step):
        pass
    return inner


@pytest.mark.parametrize("emit_in", ["process"])
def test_arguments_that_do_not_pickle_are_recorded_on_the_training_thread(captured, caplog):
    rows = [{**row, "handle": threading.Lock()} for row in ROWS]  # a row value no pickle takes
    with caplog.at_level(logging.WARNING, "otel_grpo.telemetry"):
        with captured.tel.step(1) as s:
            s.defer(_deferred.finish, 0.5, rows)
    assert _gauge(captured.metrics(), "grpo.kl") == 0.5
    assert len([e for sp in captured.spans("grpo.samples") for e in sp.events]) == 4  # their values sent as text
    said = [r.getMessage() for r in caplog.records if "do not pickle" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("otel-grpo: the deferred finish runs on the training thread")
