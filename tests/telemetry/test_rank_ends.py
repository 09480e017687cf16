"""A launcher stops a job's workers with SIGTERM when one of them fails, the signal a preemption sends: rank 0 (the
one that exports) ends the run as crashed when another rank fell first, and as preempted when the job was stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from otel_grpo.telemetry._rank_ends import _BOUND_S, RankEnds
from tests._support.waiting import wait_for

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


@pytest.mark.parametrize("fall", ["raise", "first", "kill", "preempt"])
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
            if fall != "first":
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
            how = "killed" if fall == "kill" else "raised"
            assert f"SIGTERM after rank 1 ({how}) of run 'ranked' ended on its own" in err, err[-3000:]


def _ends(store, rank: int) -> RankEnds:
    return RankEnds(store, "otel-grpo/r/", rank, range(0, 2), "host", os.getpid())


def test_a_rank_that_stopped_counts_until_it_runs_again():
    store = dist.HashStore()
    zero, one = _ends(store, 0), _ends(store, 1)
    assert zero._running() and one._running()
    one.record("stopped")  # a notebook's evaluate() that raised, caught
    assert zero.fallen() == [(1, "raised")]
    assert one._running()  # the next train() under the same id, in the same job
    assert zero.fallen() == []
    one.record("finished")
    assert zero.fallen() == []


def test_a_killed_rank_is_fallen_until_a_process_of_the_next_round_joins_in_its_place():
    """torchrun's `--max-restarts` keeps its store: a rank SIGKILLed in one round was still "killed" in the next, so
    a real preemption there ended the run as crashed."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that is gone: the killed rank's
    store = dist.HashStore()
    zero = _ends(store, 0)
    killed = RankEnds(store, "otel-grpo/r/", 1, range(0, 2), "host", dead.pid)
    assert zero._running() and killed._running()
    assert zero.fallen() == [(1, "killed")]
    assert zero.fallen() == [(1, "killed")]  # looked at again (another run's handler): still, and once
    assert _ends(store, 1)._running()  # the restart's rank 1
    assert zero.fallen() == []


_STORE_HOST = """
import sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(store.port, flush=True)
time.sleep(600)
"""


def _stopped(pid: int) -> bool:
    """Every thread of the process stopped, as /proc says (state T): the store's server thread included."""
    return all(stat.read_text().rsplit(")", 1)[1].split()[0] == "T"
               for stat in Path(f"/proc/{pid}/task").glob("*/stat"))


def test_a_store_that_does_not_answer_holds_neither_the_end_nor_the_sigterm():
    host = subprocess.Popen([sys.executable, "-c", _STORE_HOST], stdout=subprocess.PIPE, text=True)
    try:
        port = int(host.stdout.readline())
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        ends = _ends(store, 1)
        assert ends._running()
        os.kill(host.pid, signal.SIGSTOP)  # the store's host hangs (a launcher stuck in swap)
        # Stopped once the kernel says so, not when kill() returns: a host still running on the other core took
        # the writes below (a fresh CI's failure: the rank read as fallen).
        wait_for(lambda: _stopped(host.pid), "the store's host stopped", 10)
        began = time.monotonic()
        ends.record("stopped")
        assert ends.fallen() == []  # nothing known: the preemption stands
        assert time.monotonic() - began < 2 * _BOUND_S + 1
    finally:
        os.kill(host.pid, signal.SIGCONT)  # the calls left waiting get their answers and end quietly
        time.sleep(0.5)
        host.kill()
        host.wait()
