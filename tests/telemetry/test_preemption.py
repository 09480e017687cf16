"""SIGTERM (a scheduler's preemption) while a run is open: the run ends as preempted, not as a crash, and
the process still dies of SIGTERM; a program's own handler, and a forked child, are left as they were."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from ._receiver import OTLPReceiver

_LOOP = """
import logging, sys, time
logging.basicConfig(stream=sys.stderr, format="%(message)s")
from otel_grpo.telemetry import Telemetry, TelemetrySettings
tel = Telemetry(TelemetrySettings(run_id="preempted-run", output_dir=sys.argv[1], emit_in=sys.argv[2],
                                  otlp_protocol="http/protobuf", otlp_endpoint="http://127.0.0.1:" + sys.argv[3],
                                  metrics_exporters=["otlp"], traces_exporters=["otlp"]))
for step in range(10_000):
    with tel.step(step) as s:
        s.record({"kl": 0.1, "reward": 0.5})
        s.samples([{"prompt": f"p{step}", "completion": "c", "reward": 1.0}])
    time.sleep(0.05)
tel.finish()
"""


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # the field after the state: the parent's pid
            found.append(int(stat.parent.name))
    return found


def _last(rx: OTLPReceiver, name: str) -> float | None:
    found = rx.metric_points(name)
    return found[-1][1].as_double if found else None


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_sigterm_ends_the_run_as_preempted_and_the_process_still_dies_of_it(tmp_path, emit_in):
    with OTLPReceiver() as rx:
        proc = subprocess.Popen([sys.executable, "-c", _LOOP, str(tmp_path), emit_in, str(rx.port)],
                                stderr=subprocess.PIPE, text=True)
        steps = tmp_path / "steps.jsonl"
        deadline = time.monotonic() + 60
        while (not steps.exists() or len(steps.read_text().splitlines()) < 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        children = _children(proc.pid)  # the telemetry process, with emit_in="process"
        assert len(children) == (emit_in == "process")
        for pid in [proc.pid, *children]:  # a scheduler signals every process of the job
            os.kill(pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGTERM, err  # what a scheduler saw before: killed by SIGTERM
        assert "SIGTERM: ending run 'preempted-run' as preempted" in err
        assert "emitting in this process" not in err  # the telemetry process saw the run to its end
        assert _last(rx, "grpo.run.preempted") == 1.0 and _last(rx, "grpo.run.finished") == 0.0
        last = len(steps.read_text().splitlines()) - 1
        assert (tmp_path / "samples" / f"step_{last}.jsonl").exists()  # the spill is complete up to the last step


_SIGNALLED_HAND_OVER = """
import logging, os, signal, sys, threading, time
logging.basicConfig(stream=sys.stderr, format="%(message)s")
from otel_grpo.telemetry import Telemetry, TelemetrySettings

output_dir, port, inside, handler = sys.argv[1:]
stopped = []


def graceful(signum, frame):  # the program's own: end the run as preempted, then leave the loop
    tel.shutdown(preempted=True)
    stopped.append(signum)


if handler == "own":  # before the Telemetry: it then leaves SIGTERM to the program
    signal.signal(signal.SIGTERM, graceful)
tel = Telemetry(TelemetrySettings(run_id="preempted-run", output_dir=output_dir, emit_in="process",
                                  otlp_protocol="http/protobuf", otlp_endpoint="http://127.0.0.1:" + port,
                                  metrics_exporters=["otlp"], traces_exporters=["otlp"]))


class Signalled:
    # SIGTERM on the third use, from inside it, with whatever the training thread holds there held:
    # Python runs the handler right there, on this thread
    def __init__(self, inner):
        self.inner, self.uses = inner, 0

    def _signal(self):
        self.uses += 1
        if self.uses == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)


class SignalledSocket(Signalled):  # the training thread's end of the socket to the telemetry process
    def send(self, *args):
        self._signal()
        return self.inner.send(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class SignalledLock(Signalled):  # the step counter's lock, which shutdown takes too
    def __enter__(self):
        self.inner.acquire()
        if threading.current_thread() is threading.main_thread() and not stopped:
            self._signal()

    def __exit__(self, *exc):
        self.inner.release()


if inside == "socket":
    tel._sink._sock = SignalledSocket(tel._sink._sock)
else:
    tel._lock = SignalledLock(tel._lock)
for step in range(10_000):
    if stopped:
        break
    with tel.step(step) as s:
        s.record({"kl": 0.1, "reward": 0.5})
    time.sleep(0.05)
print("stopped at step", step)
"""


def _signalled_hand_over(tmp_path: Path, port: int, inside: str, handler: str) -> subprocess.CompletedProcess:
    """The script above: SIGTERM from inside the socket write or the step counter's lock, to `handler`."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _SIGNALLED_HAND_OVER, str(tmp_path), str(port), inside.split()[0],
                           handler], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - began < 30, done.stderr
    assert "emitting in this process" not in done.stderr  # the telemetry process saw the run to its end
    return done


@pytest.mark.parametrize("inside", ["socket", "step counter"])
def test_a_sigterm_inside_a_step_s_hand_over_ends_the_run_once_it_is_handed_over(tmp_path, inside):
    """The handler runs on the thread the signal interrupted, which here holds the sink's locks or the step
    counter's; the run's shutdown needs them, so it waits for the hand-over to end, and the run still ends as
    preempted at once (without the wait: the handler's whole bound, 86 s)."""
    with OTLPReceiver() as rx:
        done = _signalled_hand_over(tmp_path, rx.port, inside, "ours")
        assert done.returncode == -signal.SIGTERM, done.stderr
        assert "SIGTERM: ending run 'preempted-run' as preempted" in done.stderr
        assert _last(rx, "grpo.run.preempted") == 1.0 and _last(rx, "grpo.run.finished") == 0.0


@pytest.mark.parametrize("inside", ["socket", "step counter"])
def test_a_program_s_own_handler_ending_the_run_inside_a_hand_over_ends_it_once_it_is_handed_over(tmp_path, inside):
    """A program's handler that calls `shutdown(preempted=True)` (docs/integrations.md) runs where the signal
    interrupted the training thread: inside the socket write, with the sink's locks held, or inside the step
    counter's lock, which shutdown takes. The shutdown then runs once the hand-over is done: it used to take
    the run over in this process after half the shutdown bound (socket), or to wait for the lock for ever."""
    with OTLPReceiver() as rx:
        done = _signalled_hand_over(tmp_path, rx.port, inside, "own")
        assert done.returncode == 0 and "stopped at step" in done.stdout, done.stderr
        assert _last(rx, "grpo.run.preempted") == 1.0 and _last(rx, "grpo.run.finished") == 0.0


def test_a_handler_of_the_program_s_own_is_left_in_place(tmp_path):
    def ours(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, ours)
    try:
        tel = Telemetry(TelemetrySettings(run_id="own-handler", output_dir=tmp_path, metrics_exporters=["none"],
                                          traces_exporters=["none"]))
        assert signal.getsignal(signal.SIGTERM) is ours
        tel.shutdown()
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, before)


_TWO_RUNS = """
import signal, sys
from otel_grpo.telemetry import Telemetry, TelemetrySettings
default = lambda: signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
settings = dict(metrics_exporters=["none"], traces_exporters=["none"])
seen = [default()]
first = Telemetry(TelemetrySettings(run_id="a", output_dir=sys.argv[1] + "/a", **settings))
second = Telemetry(TelemetrySettings(run_id="b", output_dir=sys.argv[1] + "/b", **settings))
seen.append(default())
first.finish()
seen.append(default())
second.finish()
seen.append(default())
print(seen)
"""


def test_the_default_comes_back_when_the_last_run_closes(tmp_path):
    # In a process of its own: a run finished from another thread (as some tests here do, to bound a wait)
    # leaves the handler in place by design, so this process's SIGTERM action depends on the tests before.
    done = subprocess.run([sys.executable, "-c", _TWO_RUNS, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env={**os.environ})
    assert done.returncode == 0, done.stderr
    # default; ours with two runs open; still ours while b is open; the default again once both closed
    assert done.stdout.strip() == "[True, False, False, True]", done.stderr


_FORK = """
import os, signal, sys
from otel_grpo.telemetry import Telemetry, TelemetrySettings
tel = Telemetry(TelemetrySettings(run_id="forked", output_dir=sys.argv[1], metrics_exporters=["none"],
                                  traces_exporters=["none"], emit_in=sys.argv[2]))
with tel.step(0) as s:
    s.record({"kl": 0.1})
child = os.fork()  # a data loader's worker: it inherits the handler, not the run
if child == 0:
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(3)  # not reached
_, status = os.waitpid(child, 0)
print("child", os.waitstatus_to_exitcode(status), flush=True)
with tel.step(1) as s:
    s.record({"kl": 0.2})
tel.finish()
print("parent finished", flush=True)
"""


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_forked_child_dies_of_sigterm_and_leaves_the_run_alone(tmp_path, emit_in):
    done = subprocess.run([sys.executable, "-c", _FORK, str(tmp_path), emit_in], capture_output=True, text=True,
                          timeout=60, env={**os.environ})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"child {-signal.SIGTERM}", "parent finished"], done.stderr
    assert "preempted" not in done.stderr
    assert len((tmp_path / "steps.jsonl").read_text().splitlines()) == 2
