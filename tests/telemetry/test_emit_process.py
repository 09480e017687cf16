"""`emit_in="process"`: what only the process sink has, checked through a real OTLP receiver, the spill
files and the child's process id (killed, stopped, orphaned, unpicklable rows). The telemetry itself is
checked over both sinks by the parametrized suites (conftest `captured`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_grpo.signals import ReducedStats
from otel_grpo.telemetry import Telemetry, TelemetrySettings

from tests._support.waiting import alive, wait_for
from . import _deferred
from ._receiver import OTLPReceiver, attrs

ROWS = [{"prompt": f"p{i}", "completion": f"c{i}", "reward": i / 10, "rewards": {"fmt": 1.0}} for i in range(6)]


def _settings(rx: OTLPReceiver, out: Path, **extra) -> TelemetrySettings:
    return TelemetrySettings(run_id="proc", output_dir=out, otlp_protocol="http/protobuf",
                             otlp_endpoint=f"http://127.0.0.1:{rx.port}", metrics_exporters=["otlp"],
                             traces_exporters=["otlp"], top_k=2, bottom_k=1, random_k=0, emit_in="process", **extra)


def _step(tel: Telemetry, step: int, deferred: bool = False) -> None:
    """A step with a phase, stats and rows; `deferred`: its stats and rows recorded by the backend (`Step.defer`)."""
    with tel.step(step) as s:
        with s.phase("rollout"):
            pass
        if deferred:
            s.defer(_deferred.finish, 0.01 * step, ROWS)
            return
        s.record(ReducedStats({"kl": 0.01 * step}, samples={"sample_reward": [0.0, 1.0]}))
        s.samples(ROWS, group_size=3)


def _spilled(out: Path) -> dict[int, list[dict]]:
    files = sorted((out / "samples").glob("step_*.jsonl"))
    return {int(f.stem.split("_")[1]): [json.loads(line) for line in f.read_text().splitlines()] for f in files}


def test_a_run_emitted_by_the_child_process_reaches_the_receiver_whole(tmp_path):
    with OTLPReceiver() as rx:
        tel = Telemetry(_settings(rx, tmp_path))
        pid = tel._sink.pid
        assert pid is not None and pid != os.getpid() and alive(pid)
        for step in range(3):
            _step(tel, step)
        with pytest.raises(RuntimeError), tel.step(3):
            raise RuntimeError("loss is nan")
        assert tel.flush(10)
        tel.finish()
        wait_for(lambda: not alive(pid), "the telemetry process to exit", timeout=10)

    spans = rx.spans()
    steps = {attrs(s.attributes)["grpo.step"]: s for s in spans if s.name == "grpo.step"}
    assert sorted(steps) == [0, 1, 2, 3]
    assert attrs(steps[2].attributes)["grpo.metric.kl"] == pytest.approx(0.02)
    failed = steps[3]
    assert failed.status.code == 2  # ERROR
    (event,) = [attrs(e.attributes) for e in failed.events]
    assert (event["exception.type"], event["exception.message"]) == ("RuntimeError", "loss is nan")
    phases = [s for s in spans if s.name == "grpo.phase.rollout"]
    assert {bytes(p.parent_span_id) for p in phases} == {bytes(steps[i].span_id) for i in range(3)}
    events = [attrs(e.attributes) for s in spans if s.name == "grpo.samples" for e in s.events]
    assert len(events) == 9 and {e["prompt"] for e in events} >= {"p5", "p0"}
    assert rx.metric_points("grpo.run.finished")[-1][1].as_double == 1.0
    skipped = rx.metric_points("grpo.skipped_steps")[-1][1]
    assert skipped.as_double == 1 or skipped.as_int == 1
    spilled = _spilled(tmp_path)
    assert sorted(spilled) == [0, 1, 2] and all(len(rows) == 3 for rows in spilled.values())
    assert spilled[0][0]["reward.fmt"] == 1.0 and spilled[0][0]["group_size"] == 3


@pytest.mark.parametrize("deferred", [False, True], ids=["recorded", "deferred"])
def test_a_killed_child_loses_no_sample_and_this_process_takes_over(tmp_path, caplog, deferred):
    """Deferred work the child never ran runs here, once this process emits the steps it had sent."""
    with OTLPReceiver() as rx:
        tel = Telemetry(_settings(rx, tmp_path))
        pid = tel._sink.pid
        os.kill(pid, signal.SIGSTOP)  # steps 0-4 wait unacknowledged in the pipe
        with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
            for step in range(5):
                _step(tel, step, deferred)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: tel._sink.pid is None, "this process to take over", timeout=30)
            for step in range(5, 8):
                _step(tel, step, deferred)
            tel.finish()
    taken = [r for r in caplog.records if "telemetry process exited" in r.getMessage()]
    assert len(taken) == 1 and "5 unacknowledged steps" in taken[0].getMessage()
    assert sorted(_spilled(tmp_path)) == list(range(8))
    steps = sorted(attrs(s.attributes)["grpo.step"] for s in rx.spans() if s.name == "grpo.step")
    assert steps == list(range(8))
    assert rx.metric_points("grpo.run.finished")[-1][1].as_double == 1.0


def test_a_stuck_child_does_not_hold_up_shutdown_beyond_its_timeout(tmp_path, caplog):
    with OTLPReceiver() as rx:
        tel = Telemetry(_settings(rx, tmp_path, shutdown_timeout_s=2.0))
        pid = tel._sink.pid
        _step(tel, 0)
        assert tel.flush(10)
        os.kill(pid, signal.SIGSTOP)
        _step(tel, 1)
        with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
            done = threading.Thread(target=tel.finish)
            done.start()
            done.join(30)  # a bound on waiting: the assertion is that it returned, and what it kept
        assert not done.is_alive()
    assert not alive(pid)
    assert any("did not finish within" in r.getMessage() for r in caplog.records)
    assert sorted(_spilled(tmp_path)) == [0, 1]


def test_a_taken_over_run_keeps_its_shutdown_bound_against_a_black_hole(tmp_path):
    """The child killed mid-run, the collector taking connections and never answering: this process's own close
    gets `shutdown_timeout_s`, as the thread sink's does, not that plus the wait for the run's end (which its
    exporters add themselves where there is an end to deliver)."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        tel = Telemetry(TelemetrySettings(
            run_id="taken-over", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}",
            metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=tmp_path, emit_in="process",
            shutdown_timeout_s=2.0))
        _step(tel, 0)
        os.kill(tel._sink.pid, signal.SIGKILL)
        wait_for(lambda: tel._sink.pid is None, "this process to take over", timeout=30)
        _step(tel, 1)
        started = time.monotonic()
        tel.finish()
        took = time.monotonic() - started
    assert took < 15, took  # 2 s and the probes; the wait's 75 s on top took 29-77 s
    assert sorted(_spilled(tmp_path)) == [0, 1]


def test_a_stopped_child_costs_bounded_memory_and_loses_no_sample(tmp_path, caplog, monkeypatch):
    """SIGSTOP: the child acknowledges nothing. Beyond the bound this process kills it and takes over;
    the training thread never waits, and every step is still emitted."""
    from otel_grpo.telemetry import _process_sink

    monkeypatch.setattr(_process_sink, "UNACKED_LIMIT_BYTES", 64 << 10)
    big = [{**row, "completion": str(i) * 4000} for i, row in enumerate(ROWS)]  # ~25 KiB pickled per step
    with OTLPReceiver() as rx:
        tel = Telemetry(_settings(rx, tmp_path, shutdown_timeout_s=2.0))
        sink, pid = tel._sink, tel._sink.pid
        os.kill(pid, signal.SIGSTOP)
        held = []
        with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
            for step in range(12):
                with tel.step(step) as s:
                    s.samples(big, group_size=3)
                held.append(sink.unacked_bytes)
            taken_over = sink.pid is None
            done = threading.Thread(target=tel.finish)
            done.start()
            done.join(60)  # "does not hang"; its bound is shutdown_timeout_s
        assert not done.is_alive()
    assert taken_over and not alive(pid)
    per_step = max(b - a for a, b in zip([0] + held, held))
    assert max(held) <= (64 << 10) + per_step and held[-1] == 0
    assert sum("not acknowledged" in r.getMessage() for r in caplog.records) == 1
    assert sorted(_spilled(tmp_path)) == list(range(12))
    steps = sorted(attrs(s.attributes)["grpo.step"] for s in rx.spans() if s.name == "grpo.step")
    assert sorted(set(steps)) == list(range(12))
    assert rx.metric_points("grpo.run.finished")[-1][1].as_double == 1.0


def test_a_child_stopped_under_a_slow_loop_is_taken_over_within_its_time_bound(tmp_path, caplog, monkeypatch):
    """SIGSTOP under a loop of few, small steps: far from the byte bound, the child is still taken over once it
    has acknowledged nothing for `UNACKED_LIMIT_S`, not at the run's end; one warning (the steps handed over
    are no backlog of this process's), no sample lost."""
    from otel_grpo.telemetry import _process_sink, _sinks

    monkeypatch.setattr(_process_sink, "UNACKED_LIMIT_S", 1.5, raising=False)
    monkeypatch.setattr(_sinks, "BACKLOG_WARNING", 2)  # this process's own queue: the two steps after the take-over
    with OTLPReceiver() as rx, caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        tel = Telemetry(_settings(rx, tmp_path, shutdown_timeout_s=2.0))
        sink, pid = tel._sink, tel._sink.pid
        _step(tel, 0)
        assert tel.flush(10)
        os.kill(pid, signal.SIGSTOP)
        for step in (1, 2):
            _step(tel, step)
        wait_for(lambda: sink.pid is None, "this process to take over the stopped child", timeout=15)
        wait_for(lambda: not alive(pid), "the stopped child killed", timeout=15)
        for step in (3, 4):
            _step(tel, step)
        tel.finish()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "acknowledged nothing for 2s" in said[0] and "2 unacknowledged steps" in said[0], said
    assert sorted(_spilled(tmp_path)) == list(range(5))
    steps = sorted(attrs(s.attributes)["grpo.step"] for s in rx.spans() if s.name == "grpo.step")
    assert sorted(set(steps)) == list(range(5))


def test_a_whole_job_stopped_and_continued_keeps_its_child(tmp_path):
    """A suspended batch job: the trainer and its child stopped together for longer than `UNACKED_LIMIT_S`, then
    continued. The pause is no silence of the child's: nothing is taken over, nothing is warned."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from otel_grpo.telemetry import Telemetry, TelemetrySettings, _process_sink
        _process_sink.UNACKED_LIMIT_S = 3.0  # waits of 1 s: as long as the child's acknowledgement batches
        tel = Telemetry(TelemetrySettings(run_id="suspended", output_dir={str(tmp_path)!r}, emit_in="process",
                                          metrics_exporters=["none"], traces_exporters=["none"]))
        print(tel._sink.pid, flush=True)
        for step in range(30):
            with tel.step(step) as s:
                s.samples([{{"prompt": "p", "completion": "c", "reward": 1.0}}])
            time.sleep(0.1)
        print("child", "kept" if tel._sink.pid is not None else "taken over", flush=True)
        tel.finish()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    wait_for(lambda: len(_spilled(tmp_path)) >= 5, "a few steps spilled", timeout=30)
    for pid in (proc.pid, child):
        os.kill(pid, signal.SIGSTOP)
    time.sleep(6.0)  # twice the bound
    for pid in (proc.pid, child):
        os.kill(pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.split() == ["child", "kept"], (out, err)
    assert "otel-grpo" not in err, err
    assert sorted(_spilled(tmp_path)) == list(range(30))


def test_sparse_and_dense_steps_reach_the_child_without_a_flush_or_the_sender(tmp_path):
    """The training thread writes each step to the socket itself: steps that come sparsely (logging_steps > 1)
    or in a burst reach the child at once, none waits for a later step or a flush, and the sender thread is
    never woken (a wake-up cost the training thread the GIL while the sender ran)."""
    tel = Telemetry(TelemetrySettings(run_id="sparse", output_dir=tmp_path, emit_in="process",
                                      metrics_exporters=["none"], traces_exporters=["none"]))
    sink, wakes = tel._sink, []
    wake = sink._send_now.set
    sink._send_now.set = lambda: (wakes.append(1), wake())[1]
    try:
        step = 0
        for pause in (0.0, 0.3, 0.6, 1.2, 0.6, 0.05, 0.05, 0.05, 2.0, 0.0):
            time.sleep(pause)  # sparser than the acknowledgements, between them, and a burst
            with tel.step(step) as s:
                s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
            wait_for(lambda: step in _spilled(tmp_path), f"step {step} emitted by the child", timeout=10)
            step += 1
        assert wakes == [] and not sink._out  # every step written by the training thread
        assert sink.pid is not None  # the child emitted them all, no take-over
        wait_for(lambda: sink.unacked_bytes == 0, "every step acknowledged", timeout=10)
    finally:
        tel.finish()
    assert sorted(_spilled(tmp_path)) == list(range(10))


def test_a_step_submitted_to_a_full_socket_does_not_block_and_is_not_lost(tmp_path, monkeypatch):
    """A stopped child reads nothing: the socket fills, the training thread's write is partial, and the rest of
    that step and every later one go to the sender, which waits for room. Once the child runs again, every step
    reaches it whole and in order (a frame cut or reordered would fail to unpickle and end the child)."""
    from otel_grpo.telemetry import _process_sink

    monkeypatch.setattr(_process_sink, "SEND_BUFFER_BYTES", 4096)  # the kernel's least: full after a step
    big = [{**row, "completion": str(i) * 4000} for i, row in enumerate(ROWS)]  # ~25 KiB pickled per step
    tel = Telemetry(TelemetrySettings(run_id="full", output_dir=tmp_path, emit_in="process",
                                      metrics_exporters=["none"], traces_exporters=["none"]))
    sink, pid = tel._sink, tel._sink.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        def train() -> None:
            for step in range(12):
                with tel.step(step) as s:
                    s.samples(big, group_size=3)

        training = threading.Thread(target=train)
        training.start()
        training.join(30)  # a bound on waiting: the assertion is that it returned
        assert not training.is_alive(), "a submit blocked on the full socket"
        assert sink._out and _spilled(tmp_path) == {}  # the sender holds what did not fit
    finally:
        os.kill(pid, signal.SIGCONT)
    assert tel.flush(30)
    assert sink.pid == pid  # no take-over: the child read every frame whole
    assert sorted(_spilled(tmp_path)) == list(range(12)) and not sink._out
    tel.finish()
    assert sink.unacked_bytes == 0


def test_the_child_ends_the_run_as_a_crash_when_the_training_process_is_killed(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from otel_grpo.telemetry import Telemetry, TelemetrySettings
        tel = Telemetry(TelemetrySettings(run_id="orphan", output_dir={str(tmp_path)!r}, emit_in="process",
                                          metrics_exporters=["none"], traces_exporters=["none"]))
        for step in range(3):
            with tel.step(step) as s:
                s.samples([{{"prompt": "p", "completion": "c", "reward": 1.0}}])
        print(tel._sink.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # at once: the steps are in the socket, the child reads them
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    child = int(proc.stdout.split()[0])
    wait_for(lambda: not alive(child), "the orphaned telemetry process to exit", timeout=20)
    assert sorted(_spilled(tmp_path)) == [0, 1, 2]  # what was sent before the kill is emitted


def test_a_child_stopped_at_interpreter_exit_is_taken_over_and_every_step_spilled(tmp_path):
    """The process exits (no `finish()`: the exit hook) with its child stopped: the take-over comes while the
    interpreter shuts down, where the SDK cannot build exporters; the steps are still spilled, with no traceback,
    and the exit keeps its bound."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from otel_grpo.telemetry import Telemetry, TelemetrySettings
        tel = Telemetry(TelemetrySettings(run_id="exiting", output_dir={str(tmp_path)!r}, emit_in="process",
                                          traces_exporters=["otlp"], metrics_exporters=["none"],
                                          otlp_protocol="http/protobuf", otlp_endpoint="http://127.0.0.1:9",
                                          shutdown_timeout_s=2.0))
        os.kill(tel._sink.pid, signal.SIGSTOP)
        for step in range(6):
            with tel.step(step) as s:
                s.samples([{{"prompt": "p", "completion": "c", "reward": 1.0}}])
        print(tel._sink.pid, flush=True)
    """)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert sorted(_spilled(tmp_path)) == list(range(6)), proc.stderr
    assert not alive(int(proc.stdout))
    assert took < 30  # the exit hook's bound is shutdown_timeout_s; the interpreter's start and imports come on top


def test_ctrl_c_in_the_terminal_reaches_the_trainer_which_closes_the_child(tmp_path):
    script = textwrap.dedent(f"""
        import faulthandler, signal, sys, time
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for the threads' stacks on a timeout
        # Ctrl-C raises KeyboardInterrupt, as in a terminal: a test run started in the background (`cmd &`)
        # hands its processes SIGINT ignored, and Python then installs no handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from otel_grpo.telemetry import Telemetry, TelemetrySettings
        tel = Telemetry(TelemetrySettings(run_id="sigint", output_dir={str(tmp_path)!r}, emit_in="process",
                                          metrics_exporters=["none"], traces_exporters=["none"]))
        print(tel._sink.pid, flush=True)
        try:
            step = 0
            while True:
                with tel.step(step) as s:
                    s.samples([{{"prompt": "p", "completion": "c", "reward": 1.0}}])
                step += 1
                time.sleep(0.05)
        except KeyboardInterrupt:
            faulthandler.dump_traceback_later(50)  # to stderr: where it waits, should it not exit in time
            tel.finish()
            print("finished", step, flush=True)
            faulthandler.cancel_dump_traceback_later()
    """)
    # its own process group, as a terminal would start it: the signal goes to the whole group
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    wait_for(lambda: len(_spilled(tmp_path)) >= 3, "a few steps spilled", timeout=30)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # the trainer, or the child holding the trainer's stdout, still runs
        state = f"trainer {'exited' if proc.poll() is not None else 'running'}, child {'alive' if alive(child) else 'gone'}"
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGUSR1)  # every thread's stack to its stderr, wherever it waits
            time.sleep(2)
        for pid in (proc.pid, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"no exit within 60 s of Ctrl-C ({state}); the trainer's stdout:\n{out}\nits stderr:\n{err}")
    assert proc.returncode == 0 and out.startswith("finished"), err
    steps = int(out.split()[1])
    assert not alive(child)
    assert sorted(_spilled(tmp_path)) == list(range(steps + 1)) or sorted(_spilled(tmp_path)) == list(range(steps))


def test_a_row_value_that_does_not_pickle_is_sent_as_text(tmp_path, caplog):
    with OTLPReceiver() as rx, caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        tel = Telemetry(_settings(rx, tmp_path))
        with tel.step(0) as s:
            s.samples([{"prompt": "p", "completion": "c", "reward": 1.0, "handle": threading.Lock(),
                        "meta": {"tools": [threading.Lock()]}}])
        tel.finish()
    [row] = _spilled(tmp_path)[0]
    assert row["handle"].startswith("<unlocked _thread.lock") and row["reward"] == 1.0
    assert row["meta.tools"][0].startswith("<unlocked _thread.lock")
    assert sum("does not pickle" in r.getMessage() for r in caplog.records) == 1


def test_a_child_that_does_not_answer_leaves_the_telemetry_in_this_process(tmp_path, caplog, monkeypatch):
    from otel_grpo.telemetry import _process_sink

    monkeypatch.setattr(_process_sink, "START_TIMEOUT_S", 0.0)  # no child answers that fast
    with OTLPReceiver() as rx, caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        tel = Telemetry(_settings(rx, tmp_path))
        assert tel._sink.pid is None
        _step(tel, 0)
        tel.finish()
    assert sum("did not start" in r.getMessage() for r in caplog.records) == 1
    assert sorted(_spilled(tmp_path)) == [0]
    assert [attrs(s.attributes)["grpo.step"] for s in rx.spans() if s.name == "grpo.step"] == [0]


def test_process_emission_with_given_providers_is_refused():
    with pytest.raises(ValueError, match="emit_in"):
        Telemetry(TelemetrySettings(emit_in="process", metrics_exporters=["none"], traces_exporters=["none"]),
                  tracer_provider=TracerProvider())


@pytest.mark.parametrize("nice", [None, 0, 19])
def test_the_child_runs_at_a_lower_cpu_priority_than_training(tmp_path, nice):
    """Training first on a busy node: the child's nice value is the trainer's plus `emit_nice` (default 10)."""
    extra = {} if nice is None else {"emit_nice": nice}
    tel = Telemetry(TelemetrySettings(run_id="nice", output_dir=tmp_path, metrics_exporters=["none"],
                                      traces_exporters=["none"], emit_in="process", **extra))
    try:
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, tel._sink.pid) == min(ours + (10 if nice is None else nice), 19)
    finally:
        tel.finish()


@pytest.mark.parametrize("nice", [-1, 20, 1.5])
def test_emit_nice_outside_0_to_19_is_refused(nice):
    with pytest.raises(ValueError, match="emit_nice"):
        TelemetrySettings(emit_nice=nice)


def test_emit_in_takes_only_thread_or_process():
    with pytest.raises(ValueError, match="emit_in"):
        TelemetrySettings(emit_in="fork")


def test_a_preempted_run_says_so_through_the_child_process(tmp_path):
    """SIGTERM's end (shutdown(preempted=True)) reaches the receiver before the child closes; not finished."""
    with OTLPReceiver() as rx:
        tel = Telemetry(_settings(rx, tmp_path))
        _step(tel, 0)
        tel.shutdown(preempted=True)
    assert rx.metric_points("grpo.run.preempted")[-1][1].as_double == 1.0
    assert rx.metric_points("grpo.run.finished")[-1][1].as_double == 0.0
