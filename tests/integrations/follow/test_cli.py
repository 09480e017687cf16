"""`otel-grpo follow` as a user meets it: bad input ends in one readable line; --finished imports a finished run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ENV = {"OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none"}


def follow(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", "follow", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, **ENV, "PYTHONPATH": os.getcwd()})


@pytest.mark.parametrize("args, says", [
    ((), "nothing to follow"),
    (("--verl-rollouts", "x"), "--verl-rollouts alone needs --run-id"),
    (("--jsonl", "x.jsonl", "--trl-output", "d", "--trl-reward-weights", "1,a"), "--trl-reward-weights"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    out = follow(*args, "--state", str(tmp_path / "s.json"))
    assert out.returncode == 2
    assert says in out.stderr and "Traceback" not in out.stderr


def test_a_state_file_of_another_run_is_refused(tmp_path):
    state = tmp_path / "s.json"
    state.write_text(json.dumps({"version": 1, "run_id": "other", "sources": {}}))
    out = follow("--jsonl", str(tmp_path / "m.jsonl"), "--run-id", "mine", "--state", str(state))
    assert out.returncode == 2 and "belongs to run 'other'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_finished_reads_a_step_jsonl_to_its_end_and_marks_the_run_finished(tmp_path):
    path = tmp_path / "my-run.jsonl"
    path.write_text("".join(json.dumps({"step": s, "kl": 0.1 * s, "my/custom": s}) + "\n" for s in range(5)))
    out = follow("--jsonl", str(path), "--finished", "--state", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    assert "run my-run: 5 steps emitted, 0 bad lines or files skipped; run finished" in out.stderr
    again = follow("--jsonl", str(path), "--finished", "--state", str(tmp_path / "s.json"))
    assert "0 steps emitted" in again.stderr  # resumed at the end: nothing twice


def test_the_follower_does_not_import_torch():
    code = "import sys, otel_grpo.integrations.follow, otel_grpo.cli.follow; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.stdout.strip() == "False"
