"""`instrument` across a trainer's life: a second `train()` (a notebook re-run, a resume after Ctrl-C) exports
again, and `instrument()` called twice leaves one callback. Real TRL runs on the tiny model."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from transformers import TrainerCallback

from otel_grpo.integrations import instrument
from otel_grpo.integrations.trl._callback import InstrumentedCallback, OtelGrpoCallback
from tests._support.tiny_trl import make_dataset
from trl_run import exported, in_memory_telemetry, make_recording_trainer, metrics_by_name

QUIET = {"metrics_exporters": ["none"], "traces_exporters": ["none"], "emit_in": "thread"}


def _ours(trainer) -> list:
    return [c for c in trainer.callback_handler.callbacks if isinstance(c, (InstrumentedCallback, OtelGrpoCallback))]


def test_a_second_train_exports_again_through_a_new_telemetry(tmp_path):
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=1)
    first = instrument(trainer, **QUIET)
    trainer.train()
    spill = tmp_path / "train" / "samples"
    assert first.closed and len(list(spill.glob("step_*.jsonl"))) == 1
    shutil.rmtree(spill)
    trainer.train()  # again, in the same process
    [callback] = _ours(trainer)
    assert callback.telemetry is not first and callback.telemetry.closed  # built for this train(), finished by it
    assert len(list(spill.glob("step_*.jsonl"))) == 1


def test_a_closed_telemetry_given_by_the_caller_is_said_once(tmp_path, caplog):
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=1)
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    steps = len([s for s in exporter.get_finished_spans() if s.name == "grpo.step"])
    with caplog.at_level(logging.WARNING, logger="otel_grpo"):
        trainer.train()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "exports nothing" in said[0] and "instrument(trainer) again" in said[0]
    assert len([s for s in exporter.get_finished_spans() if s.name == "grpo.step"]) == steps


def test_instrument_twice_keeps_one_callback_and_the_newest_telemetry(tmp_path):
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=1)
    first = instrument(trainer, **QUIET)
    second = instrument(trainer, **QUIET)
    assert first.closed and not second.closed  # the replaced one was ours: shut down
    [callback] = _ours(trainer)
    assert callback.telemetry is second
    trainer.train()
    assert second.closed
    assert len([h for h in trainer.state.log_history if "reward" in h]) == 1


def test_instrument_refuses_what_is_no_trainer_or_telemetry_and_changes_nothing(tmp_path):
    with pytest.raises(ValueError, match="^trainer: expected a constructed TRL GRPOTrainer .*, got dict$"):
        instrument({"model": None})
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=1)
    with pytest.raises(ValueError, match="^telemetry: expected an otel_grpo Telemetry or None, got str$"):
        instrument(trainer, "http://localhost:4318")
    with pytest.raises(ValueError, match="^runid: not a setting of TelemetrySettings$"):  # a misspelt setting
        instrument(trainer, runid="exp-1")
    assert not _ours(trainer)  # nothing wrapped, no callback added


def test_a_short_run_with_the_sidecar_down_says_so(tmp_path):
    """docs/usage.md's promise: with the stack down, one warning; the example says where the samples are."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    example = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"
    out = subprocess.run([sys.executable, str(example), "--steps", "1", "--sidecar", f"http://127.0.0.1:{dead}",
                          "--metrics-port", "0", "--output-dir", str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.count("otel-grpo: exporting") == 1  # one warning for the run
    assert f"127.0.0.1:{dead}/v1/traces failed (unreachable at the end of the run)" in out.stderr
    assert "did not answer" in out.stdout and str(tmp_path / "run" / "samples") in out.stdout
    assert list((tmp_path / "run" / "samples").glob("step_*.jsonl"))


def test_a_preempted_trl_run_is_reported_preempted_and_still_dies_of_sigterm(tmp_path):
    """A scheduler's SIGTERM to a script that only called `instrument(trainer)`: the run ends as preempted
    (GRPORunPreempted, to resume) instead of vanishing as a crash, and the job's exit is unchanged."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.telemetry._receiver import OTLPReceiver

    example = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"
    out = tmp_path / "run"
    with OTLPReceiver() as rx:
        env = {**os.environ, "PYTHONPATH": os.getcwd(), "OTEL_GRPO_METRICS_EXPORTERS": "otlp",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rx.port}",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{rx.port}/v1/traces"}
        proc = subprocess.Popen([sys.executable, str(example), "--steps", "1000", "--output-dir", str(out)],
                                env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        steps, deadline = out / "steps.jsonl", time.monotonic() + 240
        while (not steps.exists() or len(steps.read_text().splitlines()) < 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGTERM, err[-3000:]
        assert "SIGTERM: ending run 'run' as preempted" in err
        preempted = rx.metric_points("grpo.run.preempted")
        finished = rx.metric_points("grpo.run.finished")
        assert preempted and preempted[-1][1].as_double == 1.0
        assert finished and finished[-1][1].as_double == 0.0


def test_a_lora_adapter_s_reference_pass_is_timed_as_the_reference(tmp_path):
    """With a PEFT adapter TRL has no reference model: it scores the reference with the policy model, adapter
    off. That pass is the `reference` phase (not pi_old's), and the KL stats come from it as without one."""
    from peft import LoraConfig

    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=2,
                                     peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                            task_type="CAUSAL_LM"))
    assert trainer.ref_model is None
    tel, _, spans = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, tel)
    trainer.train()
    out = exported(spans)
    phases = {name for name, _ in out["phases"]}
    assert "reference" in phases and "old_logprobs" not in phases  # num_iterations=1: TRL computes no pi_old
    assert {"kl", "kl_max", "ref_logp_mean"} <= set(out["steps"]["1"])


def test_the_evaluation_after_training_exports_and_ends_as_its_own_finished_run(tmp_path, caplog):
    """`trainer.train(); trainer.evaluate()`: the final evaluation's metrics reach the backend (they went nowhere,
    with a warning, once train() had finished the run), and that evaluation ends finished, not as a crash."""
    from tests.telemetry._receiver import OTLPReceiver, attrs

    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=2)
    trainer.eval_dataset = trainer.train_dataset.select(range(8))
    with OTLPReceiver() as rx, caplog.at_level(logging.WARNING, logger="otel_grpo"):
        first = instrument(trainer, otlp_endpoint=f"http://127.0.0.1:{rx.port}", metrics_exporters=["otlp"],
                           traces_exporters=["otlp"], output_dir=str(tmp_path / "telemetry"))
        trainer.train()
        assert first.closed
        trainer.evaluate()
        after = trainer._otel_grpo_instrumented.telemetry
        assert after is not first and after.closed  # the evaluation's own, finished when it returned
        finished = [p.as_double for _, p in rx.metric_points("grpo.run.finished")]
        evals = {attrs(p.attributes).get("metric") for _, p in rx.metric_points("grpo.eval")}
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("otel_grpo")]
    assert finished[-1] == 1.0 and finished.count(1.0) >= 2  # training's end, then the evaluation's
    assert {"reward", "loss"} <= evals


def test_an_evaluation_during_training_leaves_the_run_open(tmp_path, caplog):
    """`eval_strategy="steps"`: TRL evaluates inside train(); that evaluation belongs to the training run,
    which goes on exporting and ends once, when train() returns."""
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3,
                                     eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4,
                                     eval_dataset=make_dataset(4))
    with caplog.at_level(logging.WARNING, logger="otel_grpo"):
        tel = instrument(trainer, output_dir=str(tmp_path / "telemetry"), **QUIET)
        trainer.train()
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("otel_grpo")]
    spilled = (tmp_path / "telemetry" / "steps.jsonl").read_text().splitlines()
    assert {1, 2, 3} <= {json.loads(line)["step"] for line in spilled}  # the steps after the first evaluation too
    assert tel.closed and trainer._otel_grpo_instrumented.telemetry is tel  # one run, ended once


def test_the_log_dict_callback_exports_the_evaluation_after_training_too(tmp_path, caplog):
    """`Trainer(..., callbacks=[OtelGrpoCallback()])` (any transformers Trainer): the same ending as `instrument`,
    the final evaluation exported as a run of its own, finished."""
    callback = OtelGrpoCallback(output_dir=str(tmp_path / "telemetry"), **QUIET)
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=2,
                                     callbacks=[callback], eval_dataset=make_dataset(8))
    with caplog.at_level(logging.WARNING, logger="otel_grpo"):
        trainer.train()
        trained = callback.telemetry
        trainer.evaluate()
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("otel_grpo")]
    assert trained.closed and callback.telemetry is not trained and callback.telemetry.closed
    last = json.loads((tmp_path / "telemetry" / "steps.jsonl").read_text().splitlines()[-1])
    assert "eval_metric/reward" in last["metrics"]


@pytest.mark.parametrize("how", ["instrument", "callback"])
def test_the_first_optimizer_step_reaches_the_step_index_whatever_logging_steps_is(tmp_path, how):
    """A run that hangs before its first logged step (TRL logs every 10 steps, transformers every 500) still shows
    its first step, so the alerts tell it from one that never started; the values stay with the logged step."""
    import time

    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    callbacks = [OtelGrpoCallback(tel)] if how == "callback" else None
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3, logging_steps=3,
                                     num_iterations=1, callbacks=callbacks)
    if how == "instrument":
        instrument(trainer, telemetry=tel)
    began = time.perf_counter()
    trainer.train()
    took = time.perf_counter() - began
    assert tel.flush(10)  # the caller's Telemetry: still open after train()
    steps = {int(k): v for k, v in exported(exporter)["steps"].items()}
    assert sorted(steps) == [1, 3] and set(steps[1]) == {"log_interval"}
    # the stall alert's wait until the first log: the first step's time, 3 (logging_steps) times
    assert 0 < steps[1]["log_interval"] <= 3 * took
    tel.finish()
    assert "reward" in steps[3] and "loss" in steps[3]
    logged = [e["step"] for e in trainer.state.log_history if "loss" in e]
    assert logged == [3]  # TRL itself logged only step 3


class _MetricsAtFirstStep(TrainerCallback):
    """The names of the metrics exported when the first training step begins (after `eval_on_start`'s evaluation)."""

    def __init__(self, tel, reader) -> None:
        self.tel, self.reader, self.names = tel, reader, None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.names is None:
            assert self.tel.flush(10)
            self.names = set(metrics_by_name(self.reader))


@pytest.mark.parametrize("how", ["instrument", "callback"])
def test_an_evaluation_is_work_not_a_step(tmp_path, how):
    """An evaluation before the first step (`eval_on_start`), or between steps, can outlast the stall limit: each
    of its batches beats, so the alerts see work (grpo.process.activity_time), not a hang. Its values are an
    evaluation's: they go out at step 0, but the run shows no step until its first one (a hang there is
    GRPONoFirstStep) and `grpo.steps` counts the trainer's steps only."""
    import time

    tel, reader, exporter = in_memory_telemetry(tmp_path / "telemetry")
    at_first_step = _MetricsAtFirstStep(tel, reader)
    callbacks = [at_first_step] + ([OtelGrpoCallback(tel)] if how == "callback" else [])
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=2, num_iterations=1,
                                     eval_on_start=True, per_device_eval_batch_size=4, eval_dataset=make_dataset(8),
                                     callbacks=callbacks)
    if how == "instrument":
        instrument(trainer, telemetry=tel)
    began = time.time()
    trainer.train()
    assert tel.flush(10)
    gauges = metrics_by_name(reader)
    (beat,) = gauges["grpo.process.activity_time"].data.data_points
    first = min(s.start_time for s in exporter.get_finished_spans()
                if s.name == "grpo.step" and s.attributes["grpo.step"] == 1)
    assert began <= beat.value <= first / 1e9  # during the evaluation before the first step
    assert "grpo.eval" in at_first_step.names and "grpo.step_index" not in at_first_step.names
    assert "grpo.steps" not in at_first_step.names
    (steps,) = gauges["grpo.steps"].data.data_points
    assert steps.value == 2  # the two training steps; the evaluation at step 0 is none
    assert "eval_metric/reward" in exported(exporter)["steps"]["0"]  # the evaluation's values, at its step
    tel.finish()


@pytest.mark.parametrize("how", ["instrument", "callback"])
@pytest.mark.parametrize("disk", ["writing", "stuck"])
def test_a_checkpoint_save_that_writes_is_work_and_one_stuck_is_not(tmp_path, monkeypatch, how, disk):
    """A save longer than the stall limit (a 70B model's shards) is work while it writes: each change in the
    output dir, looked for every few seconds, is a heartbeat. A save stuck on a hung file system writes nothing
    and gets none, so the stall alert still fires for it."""
    import time
    from pathlib import Path

    from otel_grpo.telemetry import _writes

    monkeypatch.setattr(_writes, "LOOK_EVERY_S", 0.05)
    tel, reader, _ = in_memory_telemetry(tmp_path / "telemetry")
    callbacks = [OtelGrpoCallback(tel)] if how == "callback" else None
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=2, num_iterations=1,
                                     save_strategy="steps", save_steps=2, callbacks=callbacks)
    if how == "instrument":
        instrument(trainer, telemetry=tel)
    transformers_save, seen = trainer.save_model, {}

    def save_model(output_dir=None, _internal_call=False):
        """A slow disk: 2 s of writing a shard, or of writing nothing, then transformers' own save."""
        began = time.time()
        if disk == "writing":
            Path(output_dir).mkdir(parents=True)
            with (Path(output_dir) / "shard.bin").open("wb") as shard:
                for _ in range(10):
                    shard.write(b"x" * 4096)
                    shard.flush()
                    time.sleep(0.2)
        else:
            time.sleep(2.0)
        assert tel.flush(10)
        beats = metrics_by_name(reader).get("grpo.process.activity_time")
        seen["beats"] = [p.value - began for p in beats.data.data_points] if beats is not None else []
        transformers_save(output_dir, _internal_call=_internal_call)

    trainer.save_model = save_model
    trainer.train()
    assert (tmp_path / "train" / "checkpoint-2" / "model.safetensors").exists()  # the save ran, inside train()
    if disk == "writing":
        (beat,) = seen["beats"]
        assert 0.9 <= beat <= 2.5  # beats went on while the shard grew (one a second at most)
    else:  # TRL's save writes its model card (README.md) first: a beat as the slow part begins, if any
        assert all(beat <= 0.8 for beat in seen["beats"])  # none once nothing changed (slack for a loaded machine)
    tel.finish()


@pytest.mark.parametrize("output_dir", [".", "./", "../my-exp"])
def test_the_run_id_from_the_trainers_output_dir_is_that_directorys_own_name(tmp_path, monkeypatch, output_dir):
    """`Path(".").name` is empty and `Path("..").name` is '..': no run id. The directory's resolved name is."""
    from transformers import TrainingArguments

    from otel_grpo.integrations.trl._callback import telemetry_for

    (tmp_path / "my-exp").mkdir()
    monkeypatch.chdir(tmp_path / "my-exp")
    tel = telemetry_for(TrainingArguments(output_dir=output_dir, report_to="none"), **QUIET)
    try:
        assert tel.settings.run_id == "my-exp"
    finally:
        tel.shutdown()


def test_a_trainer_counting_input_tokens_still_logs_each_step_as_a_step(tmp_path):
    """`include_num_input_tokens_seen` puts `train_runtime` and `train_tokens_per_second` in every training log:
    each is still a logged step (its tensors' stats and samples exported there, its numbers TRL's), not the
    end-of-training summary, which alone holds `train_loss`."""
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3,
                                     include_num_input_tokens_seen="all")
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    out = exported(exporter)
    steps = {int(k): v for k, v in out["steps"].items()}
    trl = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    assert all("train_runtime" in trl[s] for s in (1, 2, 3))  # what makes such a log look like the summary
    for step in (1, 2, 3):
        assert "policy_ratio_max" in steps[step], (step, sorted(steps[step]))  # the step's tensors, reduced there
        assert steps[step]["kl"] == pytest.approx(trl[step]["kl"], rel=1e-5), step
        assert steps[step]["reward"] == pytest.approx(trl[step]["reward"], rel=1e-5), step
    assert {s["step"] for s in out["samples"]} == {1, 2, 3}
