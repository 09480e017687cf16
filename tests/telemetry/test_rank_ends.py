"""A launcher stops a job's workers with SIGTERM when one of them fails, the signal a preemption sends: rank 0 (the
one that exports) ends the run as crashed when another rank fell first, and as preempted when the job was stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ._receiver import OTLPReceiver

_WORKER = Path(__file__).with_name("dist_rank_end_worker.py")
_REPO = Path(__file__).resolve().parents[2]


def _wait_for(check, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.1)


def _last(rx: OTLPReceiver, name: str) -> float | None:
    found = rx.metric_points(name)
    return found[-1][1].as_double if found else None


@pytest.mark.parametrize("fall", ["raise", "kill", "preempt"])
def test_rank_0_ends_the_run_as_crashed_when_another_rank_fell_before_the_launchers_sigterm(tmp_path, fall):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(_REPO), os.environ.get(
        "PYTHONPATH", "")])}
    with OTLPReceiver() as rx:
        job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                "2", "--monitor-interval", "0.1", str(_WORKER), str(tmp_path), str(rx.port), fall],
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
        try:
            steps = tmp_path / "run" / "steps.jsonl"
            _wait_for(lambda: steps.exists() and len(steps.read_text().splitlines()) >= 3, "third step")
            if fall == "kill":  # the kernel's OOM killer: nothing runs in the rank
                os.kill(int((tmp_path / "rank1").read_text()), signal.SIGKILL)
            elif fall == "preempt":  # a scheduler stops the job: the launcher passes SIGTERM to every worker
                job.send_signal(signal.SIGTERM)
            _, err = job.communicate(timeout=120)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        assert _last(rx, "grpo.run.finished") == 0.0, err[-3000:]
        if fall == "preempt":
            assert _last(rx, "grpo.run.preempted") == 1.0, err[-3000:]
            assert "SIGTERM: ending run 'ranked' as preempted" in err
        else:  # a crash, which pages, not a preemption ("resume it"), which warns
            assert _last(rx, "grpo.run.preempted") == 0.0, err[-3000:]
            how = "raised" if fall == "raise" else "killed"
            assert f"SIGTERM after rank 1 ({how}) of run 'ranked' ended on its own" in err, err[-3000:]
