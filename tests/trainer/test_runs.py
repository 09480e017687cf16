"""Whole runs: resume, bad config, two processes under torchrun, and the gpu preset (bf16) on the CPU."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from otel_grpo.trainer import GRPOTrainer, load_config
from tests._support.process_group import run_group, run_two_ranks

REPO = Path(__file__).resolve().parents[2]
QUIET = {"OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none"}


def _cli(*args: str, extra_env: dict[str, str] | None = None, timeout: float = 180,
         cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, **QUIET, **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").open()]


def test_resume_continues_step_count_and_run_id(tmp_path, monkeypatch):
    for key, value in QUIET.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "run"
    base = [f"output_dir={out}", "progress=false"]
    first = GRPOTrainer(load_config(preset="tiny", overrides=[*base, "steps=3"])).train()
    second = GRPOTrainer(load_config(preset="tiny", overrides=[*base, "steps=5", "resume=true"])).train()
    assert (first.start_step, first.last_step) == (0, 2)
    assert (second.start_step, second.last_step) == (3, 4)
    assert second.run_id == first.run_id
    assert [m["step"] for m in _metrics(out)] == [0, 1, 2, 3, 4]
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["next_step"] == 5 and state["run_id"] == first.run_id


def test_otel_grpo_run_id_and_model_name_name_the_run_unless_the_flag_does(tmp_path, monkeypatch):
    """A job spec sets OTEL_GRPO_* for every process it starts: the trainer's own defaults (a generated
    run id, its model's name) must not override them; `--run-id` still wins."""
    for key, value in {**QUIET, "OTEL_GRPO_RUN_ID": "from-env", "OTEL_GRPO_MODEL_NAME": "org/policy-7b"}.items():
        monkeypatch.setenv(key, value)
    trainer = GRPOTrainer(load_config(preset="tiny", overrides=[f"output_dir={tmp_path / 'a'}", "progress=false",
                                                                "steps=1"]))
    assert trainer.run_id == "from-env"
    assert trainer.telemetry.settings.run_id == "from-env"
    assert trainer.telemetry.settings.model_name == "org/policy-7b"
    trainer.telemetry.shutdown()
    flagged = GRPOTrainer(load_config(preset="tiny", overrides=[f"output_dir={tmp_path / 'b'}", "progress=false",
                                                                "steps=1", "run_id=from-flag"]))
    assert flagged.run_id == flagged.telemetry.settings.run_id == "from-flag"
    flagged.telemetry.shutdown()
    monkeypatch.delenv("OTEL_GRPO_MODEL_NAME")
    plain = GRPOTrainer(load_config(preset="tiny", overrides=[f"output_dir={tmp_path / 'c'}", "progress=false"]))
    assert plain.telemetry.settings.model_name.startswith("demo-gpt-")
    plain.telemetry.shutdown()


def test_bad_config_fails_before_training_with_one_line(tmp_path):
    out = tmp_path / "never"
    proc = _cli("train", "--preset", "tiny", "--output-dir", str(out), "--set", "grpo.epsilon_high=-1")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "grpo.epsilon_high" in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("how", [["--run-id", "../../elsewhere"], ["--set", "run_id=exp/metrics"]])
def test_a_run_id_that_cannot_name_the_run_fails_before_training_with_one_line(tmp_path, how):
    """Its default directory would be outside runs/ (or the sidecar would read it as another run's metrics)."""
    proc = _cli("train", "--preset", "tiny", *how, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-grpo train: invalid config: run_id "), proc.stderr
    assert list(tmp_path.parent.glob("elsewhere")) == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("setting, named", [
    ("mixed_precision=fp16", "mixed_precision fp16 needs a CUDA GPU"),  # with device=cpu, on any machine
    pytest.param("device=cuda", "device is cuda, but torch", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="this machine has a CUDA GPU")),
])
def test_a_device_this_machine_lacks_fails_before_training_with_one_line(tmp_path, setting, named):
    """Accelerate would train on the CPU although cuda was asked for, and drop fp16 there, silently."""
    out = tmp_path / "never"
    proc = _cli("train", "--preset", "tiny", "--output-dir", str(out), "--set", "device=cpu", "--set", setting)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], proc.stderr
    assert not out.exists()


def test_cli_yaml_and_flags(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("task:\n  kind: reverse\noptim:\n  lr: 0.005\n")
    out = tmp_path / "run"
    proc = _cli("train", "--preset", "tiny", "--config", str(cfg), "--steps", "2", "--output-dir", str(out),
                "--run-id", "cli-run", "--seed", "3", "--no-progress", "--set", "grpo.beta=0.02")
    assert proc.returncode == 0, proc.stderr
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["beta"] == 0.02 and rows[0]["learning_rate"] == 0.005
    assert "run cli-run" in proc.stderr


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="no torchrun")
def test_two_processes_match_one_and_only_rank0_exports(tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    env = {**os.environ, **QUIET, "OTEL_GRPO_SPILL_SAMPLES": "true"}
    # the documented command as is: device "auto" must join the process group on a CPU-only machine
    args = ["train", "--preset", "tiny", "--steps", "2", "--no-progress", "--telemetry"]
    one = subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args, "--output-dir", str(single)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=180)
    assert one.returncode == 0, one.stderr
    torchrun = str(Path(sys.executable).parent / "torchrun")
    two = run_group([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "otel_grpo.cli", *args,
                     "--output-dir", str(multi)], cwd=REPO, env=env, timeout=240)
    assert two.returncode == 0, two.stderr[-3000:]
    m1, m2 = _metrics(single), _metrics(multi)
    assert len(m2) == 2  # rank 0 alone writes metrics.jsonl
    assert set(m1[0]) == set(m2[0])
    # Exact across ranks: counters cover both ranks' completions.
    assert m2[0]["samples"] == 2 * m1[0]["samples"]
    # Only rank 0 spilled samples: one selection per step, not one per rank.
    per_step = [len((multi / "samples" / f"step_{s}.jsonl").read_text().splitlines()) for s in (0, 1)]
    single_rows = [len((single / "samples" / f"step_{s}.jsonl").read_text().splitlines()) for s in (0, 1)]
    assert per_step == single_rows
    # Each kept completion carries its own diagnostics, from whichever rank it came: the gathered
    # columns are sliced per rank (length_clipped from the gather agrees with the rank's own flag).
    rows = [json.loads(line) for out in (single, multi) for s in (0, 1)
            for line in (out / "samples" / f"step_{s}.jsonl").read_text().splitlines()]
    assert {r["source_rank"] for r in rows} == {0, 1}
    for r in rows:
        assert {"kl_ref_mean", "kl_ref_max", "is_weight_max", "log_ratio_absmax", "entropy_mean"} <= r.keys()
        assert r["length_clipped"] == (0.0 if r["terminated"] else 1.0)


_RANK_ENDS = """
import atexit, os, sys
from otel_grpo.cli import main

atexit.register(lambda: print(f"rank {os.environ['RANK']} went through the interpreter's teardown", flush=True))
main()  # `otel-grpo train` as torchrun runs it (`-m otel_grpo.cli`)
"""


def test_each_rank_ends_without_the_interpreters_teardown(tmp_path):
    # torch keeps a DDP model's gloo threads alive past destroy_process_group; one that touches a Python
    # object while the interpreter finalizes aborts the rank (SIGABRT, "terminate called without an active
    # exception") and torchrun fails the job. Seen under load only, so this asserts what prevents it: each
    # rank's process ends once the run is written, before the interpreter's teardown (atexit) begins.
    script = tmp_path / "ranks.py"
    script.write_text(_RANK_ENDS)
    out = tmp_path / "run"
    done = run_two_ranks(script, "train", "--preset", "tiny", "--steps", "2", "--no-progress", "--telemetry",
                         "--output-dir", str(out), env={**QUIET, "OTEL_GRPO_SPILL_SAMPLES": "true"})
    assert "teardown" not in done.stdout, done.stdout + done.stderr[-3000:]
    # ending early loses nothing: the run's files and the summary line are complete
    assert re.search(r"run \S+: steps 0\.\.1, reward", done.stderr), done.stderr[-3000:]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert all((out / "samples" / f"step_{s}.jsonl").read_text() for s in (0, 1))


@pytest.fixture
def fresh_accelerator_state():
    # accelerate keeps one process-wide state: an earlier test's Accelerator (mixed precision "no")
    # would refuse bf16. Reset it around the test, as a new process would start.
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_gpu_preset_with_bf16_autocast_trains_on_cpu(tmp_path, fresh_accelerator_state):
    # No GPU here: the gpu preset's model, task and bf16 autocast (through accelerate) on the CPU,
    # with a smaller batch, so its shapes and mixed-precision path are exercised in every CI run.
    cfg = load_config(preset="gpu", overrides=[
        f"output_dir={tmp_path}", "device=cpu", "steps=2", "progress=false", "telemetry=false",
        "grpo.prompts_per_step=8", "grpo.group_size=4", "grpo.num_minibatches=2"])
    trainer = GRPOTrainer(cfg)
    assert trainer.acc.mixed_precision == "bf16"
    ids = torch.zeros(2, 8, dtype=torch.long)
    with trainer.acc.autocast():
        logits = trainer.unwrapped(ids)
    # accelerate hands outputs back in fp32, but computed in bf16: every value is a bf16 number ...
    assert torch.equal(logits, logits.bfloat16().float())
    assert all(p.dtype == torch.float32 for p in trainer.unwrapped.parameters())  # ... over fp32 weights
    result = trainer.train()
    history = _metrics(tmp_path)
    assert [h["step"] for h in history] == [0, 1] and result.last_step == 1
    for row in history:
        assert all(torch.isfinite(torch.tensor(v)) for v in row.values() if isinstance(v, float)), row
        assert row["grad_norm"] > 0
