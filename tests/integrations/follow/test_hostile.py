"""Hostile files never crash or stall the follower: each is skipped and reported once with file and offset,
and following goes on. Good lines come from verl 0.9.1's own FileLogger (verl_writer.py)."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time

import pytest

from otel_grpo.integrations.follow import LineTail, State, VerlMetrics, VerlRollouts
from otel_grpo.integrations.follow._tail import MAX_LINE

from tests._support.waiting import wait_for

from .test_files import Run, write_verl
from .verl_writer import dump_generations, verl_dump


def _lines(verl, tmp_path, first, last) -> list[bytes]:
    write_verl(verl, tmp_path / "src.jsonl", first, last)
    return (tmp_path / "src.jsonl").read_bytes().splitlines(keepends=True)


def _reports(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_grpo.follow" and r.levelno >= logging.WARNING]


def test_a_huge_integer_or_step_is_a_malformed_line_and_a_restart_goes_past_it(tmp_path, verl, caplog):
    path = tmp_path / "exp.jsonl"
    good = _lines(verl, tmp_path, 1, 4)
    huge = b'{"step":2,"data":{"actor/grad_norm":' + b"9" * 400 + b"}}\n"
    big_step = b'{"step":' + b"1" * 30 + b',"data":{"actor/grad_norm":1.0}}\n'
    deep = b'{"step":3,"data":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    path.write_bytes(good[0] + huge + big_step + deep + good[3])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        run = Run(tmp_path, [VerlMetrics(path)])
        run.once()
    assert run.steps() == [1, 4] and run.follower.malformed == 3
    offsets = [len(good[0]), len(good[0] + huge), len(good[0] + huge + big_step)]
    reports = _reports(caplog)
    assert len(reports) == 3 and all(f"{path}:{o}:" in m for m, o in zip(reports, offsets))
    run.tel.shutdown()
    again = Run(tmp_path, [VerlMetrics(path)])  # the saved offset is past them: a restart reads on
    again.once()
    assert again.steps() == []


def test_a_line_over_64_mib_is_skipped_once_and_the_next_lines_are_read(tmp_path, verl, caplog):
    path = tmp_path / "exp.jsonl"
    good = _lines(verl, tmp_path, 1, 3)
    with open(path, "wb") as fp:
        fp.write(good[0])
        fp.write(b'{"step":2,"data":{"x":"' + b"a" * (MAX_LINE + (1 << 20)) + b'"}}\n')
        fp.write(good[2])
    run = Run(tmp_path, [VerlMetrics(path)])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        for _ in range(4):  # one poll reads at most 64 MiB: the line streams past over a few polls
            run.once()
    assert run.steps() == [1, 3]
    assert run.follower.malformed == 1
    [report] = _reports(caplog)
    assert f"{path}:{len(good[0])}:" in report and "longer than" in report


def test_a_symlink_to_dev_zero_is_reported_once_and_a_real_file_there_is_read(tmp_path, verl, caplog):
    path = tmp_path / "exp.jsonl"
    path.symlink_to("/dev/zero")
    run = Run(tmp_path, [VerlMetrics(path)])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        for _ in range(3):
            run.once()
    assert run.steps() == [] and run.follower.malformed == 1
    [report] = _reports(caplog)
    assert str(path) in report and "not a regular file (a device)" in report
    path.unlink()
    write_verl(verl, path, 1, 2)
    run.once()
    assert run.steps() == [1, 2]


def _sample_steps(run: Run) -> list[int]:
    return sorted({s.attributes["grpo.step"] for s in run.spans.get_finished_spans() if s.name == "grpo.samples"})


def test_a_fifo_or_a_dev_zero_dump_is_skipped_and_the_other_dumps_are_read(tmp_path, caplog):
    rollouts = tmp_path / "rollouts"
    dump_generations(str(rollouts), 1)
    os.mkfifo(rollouts / "2.jsonl")  # nobody ever writes it: opening it for reading would block
    (rollouts / "3.jsonl").symlink_to("/dev/zero")  # reading it whole would never end
    dump_generations(str(rollouts), 4)
    run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        run.once()
        run.once()
    assert _sample_steps(run) == [1, 4]
    reports = _reports(caplog)
    assert len(reports) == 2 and all("not a regular file" in m for m in reports)
    assert {str(rollouts / "2.jsonl"), str(rollouts / "3.jsonl")} == {m.split(": ")[2] for m in reports}


def test_sigterm_stops_a_follower_whose_dump_dir_holds_a_fifo(tmp_path):
    rollouts, state = tmp_path / "rollouts", tmp_path / "s.json"
    dump_generations(str(rollouts), 1)
    os.mkfifo(rollouts / "2.jsonl")
    env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none",
           "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "follow", "--verl-rollouts", str(rollouts),
                             "--run-id", "fifo", "--state", str(state), "--from-start", "--poll", "0.05"],
                            env=env, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: "2.jsonl" in json.dumps(State.load(state).sources.get("verl-rollouts", {})), "the FIFO passed")
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    assert "1 steps emitted, 1 bad lines or files skipped" in proc.stderr.read()  # step 2 had nothing to send


def _unprivileged_follow(path, state, log, *args) -> subprocess.Popen:
    """The follower without the capabilities that let root read any file (setpriv): file modes apply to it."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs util-linux's setpriv")
    env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none",
           "PYTHONPATH": os.getcwd()}
    caps = "-dac_override,-dac_read_search"
    return subprocess.Popen([setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", sys.executable, "-m",
                             "otel_grpo.cli", "follow", "--verl-metrics", str(path), "--state", str(state),
                             "--poll", "0.05", *args], env=env, stderr=open(log, "w"))


def test_a_file_that_becomes_unreadable_is_reported_once_and_read_when_readable_again(tmp_path, verl):
    """Rotated to a file the follower may not read: no traceback, no exit, one report."""
    path, state, log = tmp_path / "exp.jsonl", tmp_path / "s.json", tmp_path / "follow.log"
    write_verl(verl, path, 1, 2)
    proc = _unprivileged_follow(path, state, log, "--from-start")
    try:
        size = path.stat().st_size
        wait_for(lambda: state.exists() and State.load(state).sources["verl-metrics"]["offset"] == size, "steps 1-2")
        write_verl(verl, tmp_path / "new.jsonl", 3, 4)
        (tmp_path / "new.jsonl").chmod(0o000)
        os.replace(tmp_path / "new.jsonl", path)
        wait_for(lambda: "unreadable" in log.read_text(), "the report")
        time.sleep(1.0)  # about 20 more polls of the unreadable file: the report must still be the only one
        assert proc.poll() is None
        path.chmod(0o644)
        new = path.stat()
        wait_for(lambda: State.load(state).sources["verl-metrics"] == {
            **State.load(state).sources["verl-metrics"], "inode": new.st_ino, "offset": new.st_size}, "steps 3-4")
    finally:
        proc.terminate()
    assert proc.wait(timeout=60) == 0
    err = log.read_text()
    assert "Traceback" not in err and err.count("unreadable") == 1 and "Permission denied" in err
    assert "4 steps emitted, 1 bad lines or files skipped" in err


@pytest.mark.parametrize("from_start", [True, False])
def test_a_file_unreadable_at_start_is_reported_once_and_read_once_readable(tmp_path, verl, from_start):
    """As docs/follow.md says: reported once and retried, not a usage error (exit 2). Without
    --from-start, what the file held at launch is skipped once it can be read, and the rest is read."""
    path, state, log = tmp_path / "exp.jsonl", tmp_path / "s.json", tmp_path / "follow.log"
    write_verl(verl, path, 1, 2)
    path.chmod(0o000)
    proc = _unprivileged_follow(path, state, log, *(["--from-start"] if from_start else []))
    try:
        wait_for(lambda: "unreadable" in log.read_text() or proc.poll() is not None, "the report")
        time.sleep(1.0)  # about 20 more polls: still running, still one report
        assert proc.poll() is None, log.read_text()
        path.chmod(0o644)
        size = path.stat().st_size
        wait_for(lambda: State.load(state).sources["verl-metrics"]["offset"] == size, "steps 1-2 read or passed")
    finally:
        proc.terminate()
    assert proc.wait(timeout=60) == 0
    err = log.read_text()
    assert "Traceback" not in err and err.count(": unreadable, skipped") == 1 and "Permission denied" in err
    assert f"{2 if from_start else 0} steps emitted, 1 bad lines or files skipped" in err


def test_line_tail_memory_is_bounded_by_one_line(tmp_path):
    """A backlog streams: one read call returns after about max_bytes, however much the file holds."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"x" * 100 + b"\n" + (b"y" * 10 + b"\n") * 100_000)
    tail = LineTail(path, max_line=1000)
    first = list(tail.read(max_bytes=1 << 20))
    assert first[-1][1] <= 1 << 20 and not tail.at_eof  # one chunk read: the rest waits for the next call
    rest = list(tail.read(max_bytes=1 << 20))
    assert len(first) + len(rest) == 100_001 and tail.at_eof
    skipped = LineTail(path, max_line=50)
    lines = list(skipped.read())
    assert lines[0] == (b"y" * 10, 112) and len(lines) == 100_000 and skipped.bad.count == 1



def test_an_unchanged_dump_dir_is_not_listed_on_every_poll(tmp_path):
    """Idle cost does not grow with the number of dump files: a quiet directory is listed again only
    every RESCAN_S seconds (in-place rewrites change no directory entry)."""
    rollouts = tmp_path / "rollouts"
    for step in range(1, 301):
        dump_generations(str(rollouts), step)
    source = VerlRollouts(rollouts, settle_s=0.0)
    source.restore(None, from_start=True)
    hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(rollouts, ns=(hour_ago, hour_ago))
    assert source._candidates()[1] is True  # the first look lists it
    while records := source.poll(1000):
        for record in records:
            source.mark_done(record)
    files, full = source._candidates()
    assert (files, full) == ([], False)  # nothing to look at until the directory changes
    dump_generations(str(rollouts), 301)
    files, full = source._candidates()
    assert full and files[-1] == (301, "301.jsonl")


def test_a_trainer_state_that_is_not_trls_or_a_fifo_never_crashes_the_trl_reader(tmp_path):
    from otel_grpo.integrations.follow import TrlOutput

    out = tmp_path / "trl"
    (out / "checkpoint-1").mkdir(parents=True)
    os.mkfifo(out / "checkpoint-1" / "trainer_state.json")  # opening it for reading would block
    (out / "trainer_state.json").write_text(json.dumps(
        {"global_step": "two", "max_steps": "many", "log_history": [1, "a", {"step": 1, "loss": 0.5}, {"step": "x"}]}))
    run = Run(tmp_path, [TrlOutput(out)])
    for _ in range(2):
        run.once()
    assert run.steps() == [1] and not run.follower.sources[0].ended


def test_a_dumped_score_too_large_for_a_float_is_non_finite_and_the_steps_other_samples_are_kept(tmp_path, verl,
                                                                                                 caplog):
    """verl's json.dumps writes a Python int score as its digits: 400 of them fit no float. That value is
    non-finite (counted, reported once); the step's other samples and the next steps go out."""
    rollouts = tmp_path / "rollouts"
    scores = [0.5] * 8
    scores[2], scores[5] = int("9" * 400), -int("9" * 400)
    verl_dump(str(verl), str(rollouts), 1, scores)
    verl_dump(str(verl), str(rollouts), 2)
    run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        run.once()
        run.once()
    assert _sample_steps(run) == [1, 2]
    events = {e.attributes["sample_index"]: dict(e.attributes) for s in run.spans.get_finished_spans()
              if s.name == "grpo.samples" and s.attributes["grpo.step"] == 1 for e in s.events}
    assert sorted(events) == list(range(8))
    assert events[2]["reward"] == math.inf and events[5]["reward"] == -math.inf and events[0]["reward"] == 0.5
    assert run.follower.malformed == 2
    [report] = _reports(caplog)
    assert str(rollouts / "1.jsonl") in report and "2 values" in report


@pytest.mark.parametrize("from_start", [True, False])
def test_a_fifo_metrics_path_is_never_opened_so_verls_writer_is_never_let_in(tmp_path, verl, caplog, from_start):
    """Opening a FIFO's read end, even to look at its type, lets verl's FileLogger (blocked in open "wb") in;
    closing it again makes verl's first write fail with BrokenPipeError: the follower would kill the job.
    The type is read with stat: the writer stays blocked, as with no follower, and one line says why."""
    from .conftest import Writer

    path = tmp_path / "exp.jsonl"
    os.mkfifo(path)
    writer = Writer(verl, path, None, 3)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
            run = Run(tmp_path, [VerlMetrics(path)], from_start=from_start)
            for _ in range(20):
                run.once()
                time.sleep(0.05)
        time.sleep(1.0)  # a writer let in would have written (and died) by now
        assert writer.proc.poll() is None, "verl's writer got past its open of the FIFO"
        assert run.steps() == []
        [report] = _reports(caplog)
        assert str(path) in report and "not a regular file (a FIFO)" in report
    finally:
        writer.proc.kill()
        writer.proc.wait()


def test_a_timing_that_is_no_duration_stays_a_number_and_the_steps_go_out(tmp_path, verl):
    """verl's `timing_s/<phase>` as inf (Python's json writes `Infinity`), 1e300 or 1e10 s is no phase: laid out
    before the step's end it would start before 1970 (inf crashed the follower at every restart; 1e10 failed the
    exporter's batch, which was sent again for ever as an outage). Such a reading stays a number, shown as the
    file says; the valid phases of the step, and the steps around it, go out."""
    path = tmp_path / "exp.jsonl"
    good = _lines(verl, tmp_path, 1, 3)
    odd = {"critic/score/mean": 0.5, "timing_s/gen": float("inf"), "timing_s/ref": 1e300, "timing_s/adv": 1e10,
           "timing_s/old_log_prob": float("nan"), "timing_s/update_actor": 2.0}
    path.write_bytes(good[0] + json.dumps({"step": 2, "data": odd}).encode() + b"\n" + good[2])
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    assert run.steps() == [1, 2, 3] and run.follower.malformed == 0
    phases = [s for s in run.spans.get_finished_spans() if s.name.startswith("grpo.phase.")]
    assert all(0 <= s.start_time <= s.end_time for s in phases)
    assert sorted(s.name for s in phases if s.attributes["grpo.step"] == 2) == ["grpo.phase.update_actor"]
    attrs = run.step_attrs(2)
    assert (attrs["grpo.metric.timing_s_gen"], attrs["grpo.metric.timing_s_ref"],
            attrs["grpo.metric.timing_s_adv"]) == (math.inf, 1e300, 1e10)
    assert math.isnan(attrs["grpo.metric.timing_s_old_log_prob"])


def test_bytes_that_are_not_utf8_in_a_dump_are_shown_as_u_fffd_and_the_sample_is_kept(tmp_path, verl, caplog):
    """A completion cut mid-character (a tokenizer's bad decode, written as raw bytes) is still a sample: its text
    carries U+FFFD where the bytes were, as the trainer-side telemetry does; nothing is reported malformed."""
    rollouts = tmp_path / "rollouts"
    verl_dump(str(verl), str(rollouts), 1)
    dump = rollouts / "1.jsonl"
    lines = dump.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"answer 1.3", b"answer \xff\xfe 1.3 \xe2\x82")
    dump.write_bytes(b"".join(lines))
    run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        run.once()
    events = {e.attributes["sample_index"]: dict(e.attributes) for s in run.spans.get_finished_spans()
              if s.name == "grpo.samples" for e in s.events}
    assert sorted(events) == list(range(8)) and run.follower.malformed == 0 and _reports(caplog) == []
    assert events[3]["completion"] == "answer \ufffd\ufffd 1.3 \ufffd"
