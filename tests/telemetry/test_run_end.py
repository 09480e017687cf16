"""The end of a run (`finish` vs `shutdown`) and phases measured by someone else's timer."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from .conftest import points


def test_finish_exports_run_finished_for_the_run(captured):
    with captured.tel.step(0) as s:
        s.record({"kl": 0.1})
    captured.tel.finish()
    metric = captured.metrics()["grpo.run.finished"]
    (point,) = points(metric).values()
    assert point.value == 1.0 and dict(point.attributes) == {"run_id": "test-run"}


def _marker(captured, name: str) -> float:
    (point,) = points(captured.metrics()[name]).values()
    return point.value


def test_shutdown_without_finish_leaves_the_run_unfinished(captured):
    # What the exit hook does after a crash: absent-metric alerts must still fire for it.
    # Issue 22: each process says "running" (0) from its first step, so a resumed run's
    # earlier finish or preemption no longer hides its crash.
    with captured.tel.step(0) as s:
        s.record({"kl": 0.1})
    assert _marker(captured, "grpo.run.finished") == 0.0 and _marker(captured, "grpo.run.preempted") == 0.0
    captured.tel.shutdown()
    assert _marker(captured, "grpo.run.finished") == 0.0 and _marker(captured, "grpo.run.preempted") == 0.0


def test_a_preempted_run_is_not_finished(captured):
    """SIGTERM (a scheduler's preemption): grpo.run.preempted = 1, grpo.run.finished stays 0."""
    with captured.tel.step(0) as s:
        s.record({"kl": 0.1})
    captured.tel.shutdown(preempted=True)
    assert _marker(captured, "grpo.run.preempted") == 1.0 and _marker(captured, "grpo.run.finished") == 0.0


def test_a_with_block_finishes_the_run_and_an_exception_leaves_it_unfinished(make_captured):
    """`with Telemetry(...) as tel:` cannot forget `finish()`; a crash inside it is still a crash to the alerts,
    and Ctrl-C, a deliberate stop, finishes the run (as `instrument`'s `train()` does)."""
    raised = {"completes": None, "raises": RuntimeError("boom"), "ctrl-c": KeyboardInterrupt(),
              "exits 0": SystemExit(0), "exits 1": SystemExit(1)}
    ended = {}
    for how, exc in raised.items():
        cap = make_captured(run_id=f"with-{how.replace(' ', '-')}")
        try:
            with cap.tel as tel:
                with tel.step(0) as s:
                    s.record({"kl": 0.1})
                if exc is not None:
                    raise exc
        except (RuntimeError, KeyboardInterrupt, SystemExit) as seen:
            assert seen is exc  # it propagates
        assert cap.tel.closed
        ended[how] = _marker(cap, "grpo.run.finished")
    assert ended == {"completes": 1.0, "raises": 0.0, "ctrl-c": 1.0, "exits 0": 1.0, "exits 1": 0.0}


def test_a_step_after_finish_is_said_once_and_changes_nothing(captured, caplog):
    """A script that goes on after finish(): its steps go nowhere, and the user is told (once), not left to
    wonder why the dashboards stopped."""
    with captured.tel.step(0) as s:
        s.record({"kl": 0.1})
        s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
    captured.tel.finish()
    spilled = sorted(p.name for p in captured.output_dir.rglob("*.jsonl"))
    assert spilled == ["step_0.jsonl", "steps.jsonl"]
    with caplog.at_level(logging.WARNING, logger="otel_grpo"):
        for step in (1, 2):
            with captured.tel.step(step) as s:
                s.record({"kl": 0.2})
                s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
        captured.tel.log_metrics(3, {"kl": 0.3})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "step 1 came after this Telemetry's finish() or shutdown()" in said[0]
    assert sorted(p.name for p in captured.output_dir.rglob("*.jsonl")) == spilled
    assert {dict(span.attributes)["grpo.step"] for span in captured.spans() if span.name == "grpo.step"} == {0}


def test_a_measured_phase_is_a_child_span_of_that_length_and_a_duration_observation(captured):
    end = time.time_ns()
    with captured.tel.step(3) as s:
        s.record_phase("generation", 2.5, end_ns=end)
    (step,) = captured.spans("grpo.step")
    (phase,) = captured.spans("grpo.phase.generation")
    assert phase.parent.span_id == step.context.span_id
    assert phase.end_time == end and phase.end_time - phase.start_time == 2_500_000_000
    assert phase.attributes["grpo.step"] == 3 and phase.attributes["grpo.phase"] == "generation"
    histogram = captured.metrics()["grpo.phase.duration"]
    (point,) = [p for p in histogram.data.data_points if p.attributes["phase"] == "generation"]
    assert point.count == 1 and point.sum == pytest.approx(2.5)


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf"), "x", "1.5", True, None, [1.0]])
def test_a_bad_phase_duration_names_the_argument_and_records_nothing(captured, seconds):
    with captured.tel.step(0) as s:
        with pytest.raises(ValueError, match="^seconds: expected seconds, a finite number >= 0, got "):
            s.record_phase("update", seconds)
    assert captured.spans("grpo.phase.update") == []


@pytest.mark.parametrize("end_ns", ["x", -1, 1.5e18, True, [1], 2**63, 2**70])
def test_a_bad_phase_end_names_the_argument_and_records_nothing(captured, end_ns):
    with captured.tel.step(0) as s:
        with pytest.raises(ValueError, match=r"^end_ns: expected a time in ns, an int in 0 \.\. 2\*\*63 - 1 "
                                             r"\(time.time_ns\(\)\), got "):
            s.record_phase("update", 1.0, end_ns=end_ns)
        s.record_phase("update", 1.0, end_ns=np.int64(3_000_000_000))  # any integer type
    (phase,) = captured.spans("grpo.phase.update")
    assert (phase.start_time, phase.end_time) == (2_000_000_000, 3_000_000_000)


def test_a_phase_that_would_start_before_1970_is_refused_and_the_batch_goes_out(captured):
    """A finite but absurd duration (a timer's 1e10 s) would start the span before 1970: OTLP's encoder fails on it,
    and every span of its batch (this step's, the steps beside it) was lost. It is refused; the rest goes out."""
    with captured.tel.step(0) as s:
        with pytest.raises(ValueError, match=r"^seconds: a phase of 10000000000\.0 s ending at \d+ ns would start "
                                             r"before 1970"):
            s.record_phase("generation", 1e10)
        s.record_phase("generation", 3.0, end_ns=3_000_000_000)  # from 0 on: the earliest that is fine
        s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
    (phase,) = captured.spans("grpo.phase.generation")
    assert (phase.start_time, phase.end_time) == (0, 3_000_000_000)
    assert len(captured.spans("grpo.step")) == 1 and captured.spans("grpo.samples")


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_phase_without_a_string_name_is_refused_at_the_call(captured, name):
    with captured.tel.step(0) as s:
        with pytest.raises(ValueError, match="^name: a phase needs a non-empty string name"):
            s.record_phase(name, 1.0)
        with pytest.raises(ValueError, match="^name: a phase needs a non-empty string name"):
            with s.phase(name):
                pass
    assert [sp.name for sp in captured.spans() if sp.name.startswith("grpo.phase")] == []


_SCRIPT = """
import sys
from otel_grpo import Telemetry
tel = Telemetry.from_env(run_id="script", output_dir=sys.argv[2], metrics_exporters=["none"], traces_exporters=["none"])
with tel.step(0) as s:
    s.record({"kl": 0.1})
if sys.argv[1] == "crash":
    raise RuntimeError("the training loop failed")
if sys.argv[1] == "finish":
    tel.finish()
"""


@pytest.mark.parametrize("ending, says", [("return", True), ("crash", False), ("finish", False)])
def test_a_script_that_ends_without_finish_is_told_its_run_will_look_crashed(ending, says, tmp_path):
    """The exit hook ends an open run unfinished, which the alerts take for a crash: a page after every
    successful run of a script that forgot finish(). Said at exit when no exception ended the process."""
    out = subprocess.run([sys.executable, "-c", _SCRIPT, ending, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    warned = "run 'script' not finished (last step 0), so its alerts see a crash; call finish()" in out.stderr
    assert warned == says, out.stderr


_FORK = """
import os, sys, time
from otel_grpo import Telemetry
tel = Telemetry.from_env(run_id="forked", output_dir=sys.argv[2], emit_in=sys.argv[1], metrics_exporters=["none"],
                         traces_exporters=["none"], shutdown_timeout_s=5)
def step(n):
    with tel.step(n) as s:
        s.samples([{"prompt": "p", "completion": "c", "reward": i} for i in range(4)])
for n in range(3):
    step(n)
pid = os.fork()
if pid == 0:  # a helper (a data loader's worker, a writer): its work done, it exits normally
    step(99)  # goes nowhere: the run is the parent's
    if sys.argv[3] == "finish":
        tel.finish()
    sys.exit(0)
started = time.monotonic()
os.waitpid(pid, 0)
print(f"the helper exited in {time.monotonic() - started:.2f}s", file=sys.stderr)
step(3)
tel.finish()
"""


@pytest.mark.parametrize("helper", ["exits", "finish"])
@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_forked_helper_that_exits_leaves_the_run_to_its_parent(emit_in, helper, tmp_path):
    """A fork inherits no run: a helper forked mid-run that exits (or calls finish()) says nothing of the run at
    its exit, waits on nothing of the parent's, and spills and ends nothing; the parent's run goes on whole."""
    out = subprocess.run([sys.executable, "-c", _FORK, emit_in, str(tmp_path), helper], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    assert "not finished" not in out.stderr and "WARNING" not in out.stderr.upper(), out.stderr
    took = float(out.stderr.split("the helper exited in ")[1].split("s")[0])
    assert took < 2.0, out.stderr  # not the parent's shutdown bound (5 s) spent waiting on its sink
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["step"] for line in lines) == [0, 1, 2, 3]  # each once, no helper's step
    for n in range(4):
        rows = (tmp_path / "samples" / f"step_{n}.jsonl").read_text().splitlines()
        assert len(rows) == 4, (n, rows)
