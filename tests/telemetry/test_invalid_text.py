"""Text Python holds but UTF-8 cannot (a lone surrogate: bytes a tokenizer decoded with `surrogateescape`) in a
sample row, a phase name or an exception: every step still goes out whole, over real OTLP/HTTP from either
sink, and into the spill, both with U+FFFD in its place (`_text`); `otel-grpo replay` of that spill sends the
text the live export sent. And the spill, a copy of what is exported, never stops a step's export."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.telemetry._spill import SampleSpill, SpillReader

from tests._support.replay import replay_spill
from ._receiver import OTLPReceiver, attrs

STEPS, ROWS = 4, 6
BAD = "\udc80"


def _completions(rx: OTLPReceiver) -> dict[int, list[str]]:
    """Each step's exported completions, in sample-index order."""
    out: dict[int, list[tuple[int, str]]] = {}
    for span in rx.spans():
        if span.name == "grpo.samples":
            step = attrs(span.attributes)["grpo.step"]
            out.setdefault(step, []).extend((a["sample_index"], a["completion"])
                                            for a in map(lambda e: attrs(e.attributes), span.events))
    return {step: [c for _, c in sorted(rows)] for step, rows in out.items()}


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_lone_surrogate_loses_no_row_and_reads_alike_live_spilled_and_replayed(tmp_path, emit_in):
    out = tmp_path / "run"
    with OTLPReceiver() as rx:
        tel = Telemetry(TelemetrySettings(
            run_id="sur", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{rx.port}",
            metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=out, top_k=ROWS, bottom_k=0,
            random_k=0, emit_in=emit_in))
        for step in range(STEPS):
            with tel.step(step) as s:
                with s.phase("roll" + BAD):
                    pass
                s.record({"kl": 0.01})
                s.samples([{"prompt": "p" + BAD, "completion": f"c{step}-{i}" + BAD * (i % 2), "reward": i,
                            "col" + BAD: "v"} for i in range(ROWS)])
        with pytest.raises(RuntimeError):
            with tel.step(STEPS) as s:
                raise RuntimeError("bad bytes " + BAD)
        tel.finish()

    want = {step: [f"c{step}-{i}" + "\ufffd" * (i % 2) for i in range(ROWS)] for step in range(STEPS)}
    assert _completions(rx) == want  # every step's rows exported, none lost with the batch
    steps = {attrs(s.attributes)["grpo.step"]: s for s in rx.spans() if s.name == "grpo.step"}
    assert sorted(steps) == list(range(STEPS + 1))
    assert steps[STEPS].events[0].name == "exception"
    assert attrs(steps[STEPS].events[0].attributes)["exception.message"] == "bad bytes \ufffd"
    assert {s.name for s in rx.spans()} >= {"grpo.phase.roll\ufffd"}
    event = attrs(next(s for s in rx.spans() if s.name == "grpo.samples").events[0].attributes)
    assert event["prompt"] == "p\ufffd" and event["col\ufffd"] == "v"

    # the spill: valid JSON lines (strict UTF-8), the same text, read back whole
    for path in (out / "samples").iterdir():
        for line in path.read_bytes().decode("utf-8").splitlines():
            json.loads(line)
    spill = SpillReader(out)
    assert not spill.unreadable
    spilled = {step: [r["completion"] for r in sorted(spill.samples(step), key=lambda r: r["sample_index"])]
               for step in range(STEPS)}
    assert spilled == want

    with OTLPReceiver() as again:
        replay_spill(f"http://127.0.0.1:{again.port}", out)
    assert _completions(again) == want


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_spill_write_never_raises_whatever_fails(tmp_path, caplog):
    """Not only a full disk: a row JSON cannot hold costs that write, counted and said once, never an exception
    that would cost the step its export."""
    spill = SampleSpill(tmp_path)
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        spill.write(1, [{"run_id": "r", "step": 1, "v": _Unprintable()}])
        spill.write(2, [{"run_id": "r", "step": 2, "v": _Unprintable()}, {"run_id": "r", "step": 2}])
        spill.write_step("r", 3, 1, 2, {"kl": 0.1}, {}, claims=True)  # works: the spill recovers
        spill.write(4, [{"run_id": "r", "step": 4, "completion": "x" + BAD}])  # text not made valid upstream
    assert (spill.unwritten_rows, spill.unwritten_steps, spill.written) == (4, 0, 0)
    assert [r.message for r in caplog.records if r.levelno == logging.WARNING and "spilling" in r.message] \
        and sum("spilling" in r.message for r in caplog.records if r.levelno == logging.WARNING) == 1
    assert not (tmp_path / "samples" / "step_1.jsonl").exists() and not (tmp_path / "samples" / "step_4.jsonl").exists()
    assert SpillReader(tmp_path).step_lines(3)["r"][0]["metrics"] == {"kl": 0.1}
