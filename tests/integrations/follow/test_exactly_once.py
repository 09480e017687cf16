"""Nothing dropped, skipped or sent twice: NaN written as `null`, kills before the first save, failed
exports, truncation while no follower ran, a job relaunched into its rollout dir, a second follower.
Files come from verl 0.9.1's own FileLogger (the wheel's `tracking.py`) and verl_writer.py's dumps."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time


from otel_grpo._stop_request import StopRequest
from otel_grpo.integrations.follow import Follower, FollowOptions, State, VerlMetrics, VerlRollouts
from otel_grpo.telemetry import Telemetry, TelemetrySettings

from tests._support.waiting import wait_for

from .test_files import Run, write_verl
from .verl_writer import dump_generations, load_tracking


def counter(run: Run, name: str, **attrs) -> float:
    data = run.reader.get_metrics_data()
    total = 0.0
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    total += sum(p.value for p in m.data.data_points
                                 if all(p.attributes.get(k) == v for k, v in attrs.items()))
    return total


def verl_log(verl, path, steps: dict[int, dict]) -> None:
    """verl's own Tracking with the file backend: orjson writes NaN and Inf as null."""
    tracking = load_tracking(str(verl))
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        logger = tracking.Tracking("proj", "exp", default_backend=["file"])
        for step, data in steps.items():
            logger.log(data=data, step=step)
        logger.finish()
    finally:
        del os.environ["VERL_FILE_LOGGER_PATH"]


def test_nan_and_inf_written_as_null_are_counted_nonfinite_and_their_step_is_emitted(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    verl_log(verl, path, {1: {"actor/grad_norm": 0.5}, 2: {"actor/grad_norm": math.nan},
                          3: {"actor/grad_norm": math.inf, "actor/pg_loss": 0.1}})
    assert b'"actor/grad_norm":null' in path.read_bytes()  # what verl writes
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    assert run.steps() == [1, 2, 3]  # step 2, all null, still advances the step index
    assert counter(run, "grpo.nonfinite", signal="grad_norm") == 2
    assert run.gauge("grpo.grad_norm") is None  # non-finite at the latest step: no current value, never NaN
    assert math.isnan(run.step_attrs(2)["grpo.metric.grad_norm"])  # the span carries it: the sidecar's null


def test_a_follower_killed_before_its_first_save_resumes_where_it_started(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 3)
    first = Run(tmp_path, [VerlMetrics(path)], from_start=False)  # starts at the end: step 4 on
    first.tel.shutdown()  # killed before reading anything
    with open(path, "ab") as fp:
        write_verl(verl, tmp_path / "more.jsonl", 4, 8)
        fp.write((tmp_path / "more.jsonl").read_bytes())
    second = Run(tmp_path, [VerlMetrics(path)], from_start=False)
    second.once()
    assert second.steps() == [4, 5, 6, 7, 8]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_a_failed_flush_saves_nothing_and_the_batch_is_read_again(tmp_path, verl):
    path, state = tmp_path / "exp.jsonl", tmp_path / "state.json"
    write_verl(verl, path, 1, 4)
    settings = TelemetrySettings(run_id="r", output_dir=str(tmp_path / "out"), metrics_exporters=["none"],
                                 traces_exporters=["otlp"], otlp_protocol="http/protobuf",
                                 otlp_traces_endpoint=f"http://127.0.0.1:{_dead_port()}/v1/traces",
                                 shutdown_timeout_s=0.5)
    tel = Telemetry(settings)
    follower = Follower(tel, [VerlMetrics(path)], State.load(state), FollowOptions(poll_s=0.01), from_start=True)
    saved = State.load(state).sources["verl-metrics"]
    assert saved["offset"] == 0  # the start, saved at start-up
    follower._poll()
    assert follower._emit_ready(force=False) == 4
    assert follower._commit() is False  # not flushed in time: nothing saved
    assert State.load(state).sources["verl-metrics"] == saved
    wait_for(lambda: tel.export_health.failures, "the exporter to give the batch up")
    assert follower._commit() is False  # an export failed: back to the saved point
    assert State.load(state).sources["verl-metrics"] == saved  # nothing advanced past the lost batch
    assert follower.sources[0].cursor() == saved and not follower._has_pending()
    follower._poll()  # the same four lines again
    assert [r.step for r in follower._pending["verl-metrics"]] == [1, 2, 3, 4]
    tel.shutdown()
    again = Run(tmp_path, [VerlMetrics(path)], state=State.load(state))  # a restart after the failure
    again.once()
    assert again.steps() == [1, 2, 3, 4]


def test_a_file_truncated_and_regrown_while_no_follower_ran_is_read_from_the_start(tmp_path, verl):
    """verl resumed from a checkpoint rewrites its file ("wb") past the saved offset: same inode, larger."""
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 5)
    first = Run(tmp_path, [VerlMetrics(path)])
    first.once()
    first.tel.shutdown()
    offset = path.stat().st_size
    inode = path.stat().st_ino
    write_verl(verl, path, 4, 12)  # resumed at step 4, while nobody followed
    assert path.stat().st_ino == inode and path.stat().st_size > offset
    second = Run(tmp_path, [VerlMetrics(path)])
    second.once()
    assert second.steps() == list(range(4, 13)) and second.follower.malformed == 0
    assert second.follower.sources[0].tail.resets == 1


def _samples(run: Run) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for s in run.spans.get_finished_spans():
        if s.name == "grpo.samples":
            out.setdefault(s.attributes["grpo.step"], []).extend(e.attributes["sample_index"] for e in s.events)
    return {k: sorted(v) for k, v in out.items()}


def test_a_job_relaunched_into_the_same_rollout_dir_keeps_its_samples(tmp_path, verl):
    rollouts = tmp_path / "rollouts"
    for step in range(1, 11):  # the previous job's dumps, written an hour ago
        dump_generations(str(rollouts), step)
        os.utime(rollouts / f"{step}.jsonl", ns=(time.time_ns() - 3600 * 10**9,) * 2)
    run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)], from_start=False)
    run.once()
    assert _samples(run) == {}  # the old dumps were there before the follower started
    for step in range(1, 11):  # the relaunched job writes 1.jsonl ... 10.jsonl again, in place ("w")
        dump_generations(str(rollouts), step)
    run.once()
    assert _samples(run) == {step: list(range(8)) for step in range(1, 11)}


def test_a_resent_step_keeps_its_sample_selection(tmp_path, verl):
    """Random picks depend on the run and the step: a step sent again selects the same rows."""
    rollouts = tmp_path / "rollouts"
    for step in (1, 2):
        dump_generations(str(rollouts), step)
    picks = []
    for attempt in range(2):
        run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)], state=State(tmp_path / f"s{attempt}.json"),
                  top_k=0, bottom_k=0, random_k=3)
        run.once()
        picks.append(_samples(run))
    assert picks[0] == picks[1] and all(len(v) == 3 for v in picks[0].values())


def test_a_step_sent_again_after_a_failed_flush_keeps_its_sample_indices(tmp_path, verl):
    """What was sent since the last save goes out again through the same Telemetry: its rows keep their indices
    (the sidecar stores them once), though a step's later records number theirs after the earlier ones'."""
    rollouts = tmp_path / "rollouts"
    for step in (1, 2):
        dump_generations(str(rollouts), step)
    run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)])
    saved = run.follower.state.sources["verl-rollouts"]
    run.once()
    run.follower.sources[0].restore(saved, False)  # as `_commit` does after a failed export
    run.once()
    assert _samples(run) == {step: sorted(list(range(8)) * 2) for step in (1, 2)}


def test_a_second_follower_on_one_state_file_is_refused(tmp_path):
    path, state = tmp_path / "m.jsonl", tmp_path / "s.json"
    path.write_text('{"step": 1, "kl": 0.1}\n')
    held = State.load(state)
    held.lock()
    env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none",
           "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "follow", "--jsonl", str(path), "--state", str(state),
                          "--finished"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"is in use by another otel-grpo follow (pid {os.getpid()})" in out.stderr
    held.unlock()
    out = subprocess.run(out.args, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and "1 steps emitted" in out.stderr


def test_a_backlog_streams_through_pairing_without_splitting_steps(tmp_path, verl):
    """Dumps are read a budget at a time: a step's metrics wait for its dump while dumps are still unread."""
    path, rollouts = tmp_path / "exp.jsonl", tmp_path / "rollouts"
    write_verl(verl, path, 1, 12, rollouts)
    dump = (rollouts / "1.jsonl").stat().st_size
    source = VerlRollouts(rollouts, settle_s=0.0, max_pending_bytes=2 * dump)
    run = Run(tmp_path, [VerlMetrics(path, total_steps=12), source], pair_wait_s=0.0)
    reads: list[int] = []
    poll = source.poll
    source.poll = lambda n: reads.append(len(got := poll(n))) or got  # type: ignore[method-assign]
    assert run.follower.run(StopRequest()) is True
    assert max(reads) <= 2  # never more than the budget of dumps in memory
    assert run.steps() == list(range(1, 13))  # one span per step: every pair kept together
    assert _samples(run) == {step: list(range(8)) for step in range(1, 13)}


def test_a_rollout_state_saved_before_mtimes_were_kept_sends_nothing_again(tmp_path):
    rollouts = tmp_path / "rollouts"
    for step in (1, 2, 3):
        dump_generations(str(rollouts), step)
    info = (rollouts / "3.jsonl").stat()
    source = VerlRollouts(rollouts, settle_s=0.0)
    source.restore({"done": {"3.jsonl": [info.st_ino, info.st_size]}, "floor": 2}, from_start=False)
    assert source.poll(100) == []
    source.KEEP = 0
    dump_generations(str(rollouts), 4)
    [record] = source.poll(100)
    source.mark_done(record)  # folds the legacy entry into the floor
    assert record.step == 4 and source.cursor()["done"] == {}
