"""`instrument(trainer)` as a user writes it: the telemetry it builds emits from a child process, and a real
TRL run's steps, samples and run end reach a real OTLP receiver and the spill through it."""

from __future__ import annotations

import json

import pytest

from otel_grpo.integrations import instrument
from otel_grpo.telemetry._sinks import ThreadSink
from tests.telemetry._receiver import OTLPReceiver, attrs
from tests._support.waiting import alive, wait_for
from trl_run import make_recording_trainer


def test_instrument_emits_a_trl_run_from_a_child_process(tmp_path):
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3)
    with OTLPReceiver() as rx:
        tel = instrument(trainer, otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{rx.port}",
                         metrics_exporters=["otlp"], traces_exporters=["otlp"])
        pid = tel._sink.pid
        assert pid is not None and alive(pid)
        trainer.train()
        wait_for(lambda: not alive(pid), "the telemetry process to exit after train()", timeout=10)

    spans = rx.spans()
    steps: dict[int, dict] = {}
    for span in spans:  # the end-of-training summary is a second span of the last step
        if span.name == "grpo.step":
            steps.setdefault(attrs(span.attributes)["grpo.step"], {}).update(attrs(span.attributes))
    logged = {h["step"]: h for h in trainer.state.log_history if "reward" in h}
    assert sorted(steps) == sorted(logged) == [1, 2, 3]
    for step, logs in logged.items():
        assert steps[step]["grpo.metric.reward"] == pytest.approx(logs["reward"])
        assert steps[step]["grpo.metric.entropy"] == pytest.approx(logs["entropy"], rel=1e-5)
    exported = {}
    for span in spans:
        if span.name == "grpo.samples":
            step = attrs(span.attributes)["grpo.step"]
            exported.setdefault(step, []).extend(attrs(e.attributes)["completion"] for e in span.events)
    generated = {i + 1: g["completions"] for i, g in enumerate(trainer.records["generations"])}
    assert {s: sorted(c) for s, c in exported.items()} == {s: sorted(c) for s, c in generated.items()}
    assert {p.parent_span_id for p in spans if p.name == "grpo.phase.rollout"}  # phases made in the child
    assert rx.metric_points("grpo.run.finished")[-1][1].as_double == 1.0
    spill = sorted((tmp_path / "train" / "samples").glob("step_*.jsonl"))
    assert len(spill) == 3
    assert {json.loads(line)["run_id"] for f in spill for line in f.read_text().splitlines()} == {"train"}


def test_the_telemetry_process_finishes_the_logged_steps_without_torch(tmp_path):
    """The training thread hands each logged step over gathered, not finished (`Step.defer`): the telemetry
    process finishes every stat and builds the sample rows, and does so without importing torch (about 280 MB
    of its own memory per process that exports)."""
    from transformers import TrainerCallback

    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3)
    tel = instrument(trainer, metrics_exporters=["none"], traces_exporters=["none"])
    pid, seen = tel._sink.pid, {}

    class Look(TrainerCallback):  # after instrument's: the step before the last is handed over by now
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                assert tel.flush(10.0)  # the child has emitted every step so far
                maps = open(f"/proc/{pid}/maps").read()
                seen["torch"] = "libtorch" in maps or "/torch/" in maps
                seen["python"] = "python" in maps

    trainer.add_callback(Look())
    trainer.train()
    assert seen == {"torch": False, "python": True}
    spill = sorted((tmp_path / "train" / "samples").glob("step_*.jsonl"))
    rows = [json.loads(line) for f in spill for line in f.read_text().splitlines()]
    assert len(spill) == 3 and all("reward" in r and "advantage" in r for r in rows)  # finished in the child


def test_the_call_then_the_environment_win_over_what_instrument_derives_from_the_trainer(tmp_path, monkeypatch):
    """A job spec's OTEL_GRPO_RUN_ID / _MODEL_NAME / _EMIT_IN hold for `instrument(trainer)`: the run name,
    output dir and model name it reads from the trainer, and its child-process default, only fill gaps."""
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=1)
    none = {"metrics_exporters": ["none"], "traces_exporters": ["none"]}
    tel = instrument(trainer, **none)
    assert (tel.run_id, tel.settings.output_dir) == ("train", tmp_path / "train")  # the output dir's name
    assert tel.settings.model_name == trainer.model.config._name_or_path and tel.settings.emit_in == "process"
    tel.shutdown()
    tel = instrument(trainer, emit_in="thread", run_id="call", **none)
    assert isinstance(tel._sink, ThreadSink) and tel.run_id == "call"
    tel.shutdown()
    for key, value in {"OTEL_GRPO_EMIT_IN": "thread", "OTEL_GRPO_RUN_ID": "env-run", "OTEL_GRPO_MODEL_NAME": "org/m",
                       "OTEL_GRPO_OUTPUT_DIR": str(tmp_path / "spill")}.items():
        monkeypatch.setenv(key, value)
    tel = instrument(trainer, **none)
    assert isinstance(tel._sink, ThreadSink)
    assert (tel.run_id, tel.settings.model_name, tel.settings.output_dir) == ("env-run", "org/m", tmp_path / "spill")
    tel.shutdown()
    tel = instrument(trainer, run_id="call", **none)  # the call still wins over the environment
    assert tel.run_id == "call"
    tel.shutdown()


def test_a_training_process_that_dies_leaves_no_traceback_of_the_telemetry_process(tmp_path):
    """A crashed torchrun rank: the last traceback on the terminal must be the rank's, not our BrokenPipeError.
    The child answers a flush to a training process whose end of the pipe is already closed."""
    import os
    import pickle
    import subprocess
    import sys
    from multiprocessing import Pipe

    from otel_grpo.telemetry import TelemetrySettings
    from otel_grpo.telemetry import _clock as clock

    ours, theirs = Pipe()
    child = subprocess.Popen([sys.executable, "-m", "otel_grpo.telemetry._child", str(theirs.fileno())],
                             pass_fds=(theirs.fileno(),), stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    theirs.close()
    settings = TelemetrySettings(run_id="gone", output_dir=str(tmp_path), metrics_exporters=["none"],
                                 traces_exporters=["none"])
    ours.send({"settings": settings.model_dump(), "rank": 0, "world_size": 1, "local_rank": 0,
               "clock": clock.anchor_ns()})
    assert ours.recv()[0] == "ready"
    ours.send_bytes(pickle.dumps(("flush", 1, 1.0)))
    ours.close()  # the training process dies before the answer
    assert child.wait(timeout=60) == 0
    assert "Traceback" not in child.stderr.read()
