"""The follower on files verl's own writer produced: bad lines, partial lines, a restarted job's truncation,
rotation, and when a run counts as finished. In process, with in-memory OpenTelemetry exporters."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_grpo._stop_request import StopRequest
from otel_grpo.integrations.follow import (Follower, FollowOptions, JsonlStream, LineTail, State, VerlMetrics,
                                           VerlRollouts)
from otel_grpo.telemetry import Telemetry, TelemetrySettings

from .conftest import WRITER


class Run:
    """A Telemetry on in-memory exporters and a follower over the given sources (shut down after the test)."""

    made: list[Telemetry] = []

    def __init__(self, tmp_path, sources, *, state=None, from_start=True, pair_wait_s=0.0, writes=(),
                 look_every_s=5.0, **settings):
        self.spans = InMemorySpanExporter()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.tel = Telemetry(TelemetrySettings(run_id="r", output_dir=str(tmp_path / "out"), **settings),
                             meter_provider=MeterProvider(metric_readers=[self.reader]), tracer_provider=tracer)
        Run.made.append(self.tel)
        self.follower = Follower(self.tel, sources, state or State.load(tmp_path / "state.json"),
                                 FollowOptions(poll_s=0.01, pair_wait_s=pair_wait_s, look_every_s=look_every_s),
                                 from_start=from_start, writes=writes)

    def once(self) -> None:
        """One poll and emit, as the loop does, then commit."""
        f = self.follower
        f._poll()
        if f._emit_ready(force=False):
            f._commit()
        self.tel.flush()

    def steps(self) -> list[int]:
        return [s.attributes["grpo.step"] for s in self.spans.get_finished_spans() if s.name == "grpo.step"]

    def step_attrs(self, step: int) -> dict:
        return next(dict(s.attributes) for s in self.spans.get_finished_spans()
                    if s.name == "grpo.step" and s.attributes["grpo.step"] == step)

    def gauge(self, name: str) -> float | None:
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        return m.data.data_points[-1].value
        return None

    def gauges(self, name: str, label: str) -> dict[str, float]:
        """A templated gauge's current data points, by `label`'s value ({} where it has none)."""
        data = self.reader.get_metrics_data()
        return {p.attributes[label]: p.value for rm in (data.resource_metrics if data else ())
                for sm in rm.scope_metrics for m in sm.metrics if m.name == name for p in m.data.data_points}


def write_verl(verl, path, first, last, rollouts="-"):
    subprocess.run([sys.executable, str(WRITER), str(verl), str(path), str(rollouts), str(first), str(last)],
                   check=True, stdout=subprocess.DEVNULL)


def test_malformed_lines_are_counted_reported_once_each_and_skipped(tmp_path, verl, caplog):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 2)
    with open(path, "ab") as fp:  # what a crash mid-write or a stray writer leaves behind
        fp.write(b'{"step": 3, "data": {"actor/pg_loss": \n')
        fp.write(b'["not", "an", "object"]\n')
        fp.write(b'{"step": "4", "data": {}}\n')
    good = path.read_bytes().splitlines()[0].replace(b'"step":1', b'"step":5')
    with open(path, "ab") as fp:
        fp.write(good + b"\n")
    run = Run(tmp_path, [VerlMetrics(path)])
    with caplog.at_level(logging.WARNING, logger="otel_grpo.follow"):
        run.once()
    assert run.steps() == [1, 2, 5]
    assert run.follower.malformed == 3
    reports = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(reports) == 3 and all("\n" not in m and str(path) in m for m in reports)


def test_a_partial_last_line_waits_for_its_newline(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 2)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1][:40])  # the writer is in the middle of step 2
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    assert run.steps() == [1] and run.follower.malformed == 0
    with open(path, "ab") as fp:
        fp.write(lines[1][40:])
    run.once()
    assert run.steps() == [1, 2] and run.follower.malformed == 0
    assert run.step_attrs(2)["grpo.metric.loss_policy"] == pytest.approx(-0.01)  # verl's actor/pg_loss is the policy term


def test_a_restarted_verl_job_truncates_its_file_and_is_read_again_from_the_start(tmp_path, verl):
    """verl's FileLogger opens with "wb": a job resumed from a checkpoint starts the file over."""
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 5)
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    write_verl(verl, path, 4, 6)  # resumed from the step-3 checkpoint
    run.once()
    assert run.steps() == [1, 2, 3, 4, 5, 4, 5, 6]
    assert run.follower.sources[0].tail.resets == 1


def test_a_rotated_file_is_finished_then_the_new_one_followed(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 2)
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    write_verl(verl, tmp_path / "tmp.jsonl", 3, 3)
    with open(path, "ab") as fp:  # a last line lands in the old file just before it is moved away
        fp.write((tmp_path / "tmp.jsonl").read_bytes())
    path.rename(tmp_path / "exp.jsonl.1")
    write_verl(verl, path, 4, 5)
    run.once()
    assert run.steps() == [1, 2, 3, 4, 5]


def test_resume_from_saved_state_neither_repeats_nor_skips(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 3)
    first = Run(tmp_path, [VerlMetrics(path)])
    first.once()
    first.tel.shutdown()
    with open(path, "ab") as fp:  # the job goes on while no follower runs
        write_verl(verl, tmp_path / "more.jsonl", 4, 6)
        fp.write((tmp_path / "more.jsonl").read_bytes())
    second = Run(tmp_path, [VerlMetrics(path)], from_start=True)  # a saved state wins over --from-start
    second.once()
    assert first.steps() == [1, 2, 3] and second.steps() == [4, 5, 6]


def test_without_from_start_only_new_lines_are_read(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 3)
    run = Run(tmp_path, [VerlMetrics(path)], from_start=False)
    run.once()
    with open(path, "ab") as fp:
        write_verl(verl, tmp_path / "more.jsonl", 4, 4)
        fp.write((tmp_path / "more.jsonl").read_bytes())
    run.once()
    assert run.steps() == [4]


def test_metrics_and_rollouts_pair_into_one_step_with_phases_and_samples(tmp_path, verl):
    path, rollouts = tmp_path / "exp.jsonl", tmp_path / "rollouts"
    write_verl(verl, path, 1, 2, rollouts)
    run = Run(tmp_path, [VerlMetrics(path, total_steps=2), VerlRollouts(rollouts, settle_s=0.0)], pair_wait_s=30)
    assert run.follower.run(StopRequest()) is True  # step 2 of 2: the run ended
    run.tel.finish()
    assert run.steps() == [1, 2]
    attrs = run.step_attrs(1)
    # verl names resolved through the catalog; timing_s/* became phases, not gauges
    assert attrs["grpo.metric.reward"] == pytest.approx(0.501) and attrs["grpo.metric.mismatch_kl"] == 0.002
    assert attrs["grpo.metric.prompt_length_mean"] == 50.0 and attrs["grpo.metric.mfu/actor"] == 0.31
    assert not any(k.startswith("grpo.metric.timing_s") for k in attrs)
    spans = run.spans.get_finished_spans()
    phases = [s.name for s in spans if s.name.startswith("grpo.phase.") and s.attributes["grpo.step"] == 1]
    assert phases == ["grpo.phase.gen", "grpo.phase.old_log_prob", "grpo.phase.ref", "grpo.phase.adv",
                      "grpo.phase.update_actor"]
    events = [e for s in spans if s.name == "grpo.samples" and s.attributes["grpo.step"] == 1 for e in s.events]
    assert len(events) == 8
    first = next(dict(e.attributes) for e in events if e.attributes["sample_index"] == 1)
    assert first["prompt"] == "question 1.1" and first["completion"] == "answer 1.1" and first["reward"] == 0.5
    assert first["reward.acc"] == 1.0 and first["pred"] == "1" and first["ground_truth"] == "1"
    assert run.gauge("grpo.run.finished") == 1.0


def test_sources_pair_by_their_peer_not_by_name(tmp_path):
    """A peer's one scalars source and one samples source pair, whatever they are called; TRL's output
    holds both, a JSONL of our own names has no peer."""
    from otel_grpo.integrations.follow import JsonlStream, TrlOutput
    from otel_grpo.integrations.follow._loop import _pairs

    metrics, rollouts = VerlMetrics(tmp_path / "m.jsonl"), VerlRollouts(tmp_path / "r")
    others = [TrlOutput(tmp_path / "trl"), JsonlStream("jsonl", tmp_path / "j.jsonl")]
    assert {k: v.name for k, v in _pairs([metrics, rollouts, *others]).items()} == {
        "verl-metrics": "verl-rollouts", "verl-rollouts": "verl-metrics"}
    mine = JsonlStream("my-verl", tmp_path / "mine.jsonl", source="verl")
    assert {k: v.name for k, v in _pairs([mine, rollouts]).items()} == {
        "my-verl": "verl-rollouts", "verl-rollouts": "my-verl"}
    assert _pairs([metrics, mine, rollouts]) == {}  # two scalars sources of one peer: which pairs is unknown


def test_finished_reads_the_last_dump_too(tmp_path, verl):
    """`--finished`: no waiting for the newest dump file to settle, and every step keeps its samples."""
    path, rollouts = tmp_path / "exp.jsonl", tmp_path / "rollouts"
    write_verl(verl, path, 1, 3, rollouts)
    run = Run(tmp_path, [VerlMetrics(path), VerlRollouts(rollouts, settle_s=0.0)], pair_wait_s=30)
    assert run.follower.run(StopRequest(), drain=True) is True
    spans = run.spans.get_finished_spans()
    assert run.steps() == [1, 2, 3]
    assert sorted(s.attributes["grpo.step"] for s in spans if s.name == "grpo.samples") == [1, 2, 3]


def test_files_that_stop_growing_stay_live(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    write_verl(verl, path, 1, 3)
    run = Run(tmp_path, [VerlMetrics(path, total_steps=100)])
    stop = StopRequest()
    timer = threading.Timer(1.0, stop.request)  # the user stops the follower; the job never reached step 100
    timer.start()
    assert run.follower.run(stop) is False
    run.tel.shutdown()
    assert run.steps() == [1, 2, 3]
    assert run.gauge("grpo.run.finished") == 0  # exported 0 from the first step: not finished


def test_line_tail_keeps_offsets_exact_across_reads(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\nbb\nccc")
    tail = LineTail(path)
    assert list(tail.read()) == [(b"a", 2), (b"bb", 5)]
    assert tail.position.offset == 5
    with open(path, "ab") as fp:
        fp.write(b"\n")
    assert list(tail.read()) == [(b"ccc", 9)]
    assert json.dumps(tail.position.offset) == "9"


def test_a_checkpoint_written_between_steps_is_a_heartbeat_and_a_quiet_folder_is_none(tmp_path):
    """A job's files show no work between logged steps, but a save writes into its checkpoint folder
    (`--checkpoints`): each change there is a heartbeat, so a long save is no stall; a hung job writes nothing."""
    import time

    metrics, checkpoints = tmp_path / "m.jsonl", tmp_path / "checkpoints"
    metrics.write_text(json.dumps({"step": 1, "kl": 0.1}) + "\n")
    run = Run(tmp_path, [JsonlStream("jsonl", metrics)], writes=[checkpoints], look_every_s=0.05)
    stop = StopRequest()
    thread = threading.Thread(target=run.follower.run, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while run.steps() != [1] and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # ten looks at a folder that is not there: no change, no beat
        assert run.tel.flush(10) and run.steps() == [1]
        assert run.gauge("grpo.process.activity_time") is None
        began = time.time()
        shard = checkpoints / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt"
        shard.parent.mkdir(parents=True)
        shard.write_bytes(b"x" * 1024)
        while run.gauge("grpo.process.activity_time") is None and time.monotonic() < deadline:
            time.sleep(0.05)
            run.tel.flush(10)
        assert began <= run.gauge("grpo.process.activity_time") <= time.time()
        assert run.gauge("grpo.step_index") == 1  # work, not a step
    finally:
        stop.request()
        thread.join(30)
