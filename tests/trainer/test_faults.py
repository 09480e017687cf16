"""Each injected fault produces the signal it is meant to."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def test_kl_spike_makes_kl_jump(train_run):
    h = train_run("steps=6", "faults.inject=[kl-spike@3]").result.history
    assert h[3]["learning_rate"] == 100 * h[2]["learning_rate"]
    assert max(x["kl"] for x in h[4:]) > 5 * max(x["kl"] for x in h[:3])


def test_sorting_a_kl_spike_steps_samples_by_kl_shows_what_drove_the_steps_kl(train_run, tmp_path):
    # every sample of every step kept: the spiking step's completions, each with its own KL
    run = train_run("steps=5", "faults.inject=[kl-spike@3]", random_k=10_000)
    spike = max(range(5), key=lambda s: run.result.history[s]["kl"])
    assert spike >= 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples" / f"step_{spike}.jsonl").read_text().splitlines()]
    step = run.result.history[spike]
    # the step's KL is the samples' token-weighted KL (each read as many times by the update), its
    # largest token KL the largest sample's: the per-sample values are measured where the step's are
    lengths = [r["completion_length"] for r in rows]
    weighted = sum(r["kl_ref_mean"] * n for r, n in zip(rows, lengths)) / sum(lengths)
    assert weighted == pytest.approx(step["kl"], rel=1e-5)
    assert max(r["kl_ref_max"] for r in rows) == pytest.approx(step["kl_max"], rel=1e-5)
    entropy = sum(r["entropy_mean"] * n for r, n in zip(rows, lengths)) / sum(lengths)
    assert entropy == pytest.approx(step["entropy"], rel=1e-5)


def test_rollout_drift_moves_is_ratio_and_mismatch(train_run):
    h = train_run("steps=6", "faults.inject=[rollout-drift@2]").result.history
    before = max(x["mismatch_k3_kl"] for x in h[:3])  # step 2's rollout still came from a clean copy
    assert min(x["mismatch_k3_kl"] for x in h[4:]) > 10 * before
    assert max(abs(x["is_ratio_max"] - 1) for x in h[4:]) > 10 * max(abs(x["is_ratio_max"] - 1) for x in h[:3])


def test_nan_step_is_skipped_counted_and_training_goes_on(train_run, tmp_path):
    run = train_run("steps=5", "faults.inject=[nan@2]")
    h = run.result.history
    assert run.counter("grpo.skipped_steps") == 1
    assert run.counter("grpo.nonfinite") >= 1  # the NaN loss was counted, not exported
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert lines[2]["loss"] is None and lines[3]["loss"] is not None
    assert all(torch.isfinite(torch.tensor(x["kl"])) for x in h)
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, deadline_s: float = 120) -> list[str]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n:
            return lines
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"{path} never reached {n} lines")


def test_stall_stops_progress_until_ctrl_c_then_exits_cleanly(tmp_path):
    out = tmp_path / "run"
    env = {"OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none",
           "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_grpo.cli", "train", "--preset", "tiny", "--steps", "6", "--fault", "stall@2",
         "--output-dir", str(out), "--no-progress"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_lines(out / "metrics.jsonl", 2, proc)
        ckpt = out / "checkpoint.pt"
        time.sleep(1.0)  # the stall: the process is alive and step 2 does not come
        assert proc.poll() is None
        assert len((out / "metrics.jsonl").read_text().splitlines()) == 2 and not ckpt.exists()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "interrupted" in err
    assert torch.load(ckpt, weights_only=False)["next_step"] == 2  # nothing lost, resumable


def test_failed_batch_is_skipped_not_fatal(train_run, tmp_path):
    run = train_run("steps=4", "faults.inject=[bad-batch@2]")
    h = run.result.history
    assert len(h) == 4 and h[2].get("skipped") == 1.0 and "reward" in h[3]
    assert run.counter("grpo.skipped_steps") == 1
    failed = [s for s in run.spans("grpo.phase.reward") if not s.status.is_ok]
    assert [s.attributes["grpo.step"] for s in failed] == [2]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [line["step"] for line in lines] == [0, 1, 2, 3] and lines[2].get("skipped") == 1.0


def test_sigterm_is_a_preemption_and_ctrl_c_is_not():
    """The loop ends a SIGTERM'd run as preempted (grpo.run.preempted), a Ctrl-C'd one as finished."""
    from otel_grpo.trainer._runtime import StopFlag

    term, interrupt = StopFlag(), StopFlag()
    term.on_signal(signal.SIGTERM, None)
    interrupt.on_signal(signal.SIGINT, None)
    assert term.is_set() and term.preempted
    assert interrupt.is_set() and not interrupt.preempted


def test_a_step_without_a_statistic_leaves_its_gauge_without_a_data_point(tmp_path):
    """The demo trainer's failed batch records no statistic, a NaN loss is none: the gauges do not serve the
    step before's values as the last step's."""

    def gauges(run) -> dict[str, list[float]]:
        return {name: [p.value for p in m.data.data_points] for name, m in run.metrics().items()
                if name in ("grpo.reward.mean", "grpo.kl", "grpo.loss", "grpo.step_index")}

    from .conftest import train_captured

    failed = gauges(train_captured(tmp_path / "failed", "steps=3", "faults.inject=[bad-batch@2]"))
    assert failed == {"grpo.step_index": [2.0]}
    nan = gauges(train_captured(tmp_path / "nan", "steps=3", "faults.inject=[nan@2]"))
    assert "grpo.loss" not in nan and len(nan["grpo.reward.mean"]) == 1 and nan["grpo.step_index"] == [2.0]
