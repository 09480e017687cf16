"""Step, phase and sample spans as the sidecar decodes them."""

from __future__ import annotations

import json
import shutil
import logging
import math
import random

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from otel_grpo.signals import ReducedStats
from otel_grpo.telemetry._samples import TRUNCATION_MARKER


def _rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "prompt": f"prompt {i}",
            "completion": f"completion {i}",
            "reward": rng.random(),
            "rewards": {"format": 1.0, "accuracy": float(i % 2)},
            "advantage": rng.gauss(0, 1),
            "completion_length": 10 + i,
        }
        for i in range(n)
    ]


def test_step_span_carries_every_scalar_non_finite_ones_too(captured):
    """The sidecar stores a non-finite value as null: a diverged step is a gap there, not its last finite value
    (tests/sidecar/test_nonfinite_steps.py); Prometheus gets no data point for it (test_metrics.py)."""
    stats = ReducedStats({f"extra_{i}": float(i) for i in range(150)} | {"kl": 0.1, "reward_fn_mean/format": 0.5})
    with captured.tel.step(7) as s:
        s.record(stats)
        s.record({"clip_ratio/low_mean": 0.01, "loss": math.nan})
    (span,) = captured.spans("grpo.step")
    attrs = span.attributes
    assert attrs["grpo.run_id"] == "test-run" and attrs["grpo.step"] == 7
    assert attrs["grpo.metric.kl"] == 0.1
    assert attrs["grpo.metric.reward_fn_mean/format"] == 0.5
    assert attrs["grpo.metric.clip_ratio_low_mean"] == 0.01  # TRL name -> stat key
    assert attrs["grpo.metric.extra_149"] == 149.0
    assert math.isnan(attrs["grpo.metric.loss"])
    metric_attrs = [k for k in attrs if k.startswith("grpo.metric.")]
    assert len(metric_attrs) == 154


def test_a_provider_with_the_default_attribute_limit_is_reported_once(caplog):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    tel = Telemetry(TelemetrySettings(spill_samples=False), meter_provider=MeterProvider(),
                    tracer_provider=TracerProvider())
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        for step in range(3):
            tel.log_metrics(step, {f"m{i}": 1.0 for i in range(200)})
        tel.shutdown()
    ours = [r for r in caplog.records if r.name == "otel_grpo.telemetry"]
    assert len(ours) == 1 and "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in ours[0].getMessage()


def test_phase_spans_are_children_of_the_step(captured):
    with captured.tel.step(1) as s:
        with s.phase("rollout"):
            current = trace.get_current_span()
        with s.phase("update"):
            pass
    (step,) = captured.spans("grpo.step")
    phases = {sp.name: sp for sp in captured.spans() if sp.name.startswith("grpo.phase.")}
    assert set(phases) == {"grpo.phase.rollout", "grpo.phase.update"}
    for name, span in phases.items():
        assert span.parent.span_id == step.context.span_id
        assert span.attributes["grpo.phase"] == name.rsplit(".", 1)[1]
        assert span.attributes["grpo.run_id"] == "test-run" and span.attributes["grpo.step"] == 1
        assert span.status.status_code is StatusCode.UNSET and not span.events
        assert step.start_time <= span.start_time <= span.end_time <= step.end_time
    assert phases["grpo.phase.rollout"].end_time <= phases["grpo.phase.update"].start_time
    # Spans are made from the step's record after it: none of ours is current on the training thread.
    assert not current.get_span_context().is_valid


def test_a_phase_that_raises_is_an_error_span_with_an_exception_event(captured):
    with pytest.raises(ValueError), captured.tel.step(2) as s:
        with s.phase("rollout"):
            pass
        with s.phase("reward"):
            raise ValueError("reward model timed out")
    (step,) = captured.spans("grpo.step")
    (phase,) = captured.spans("grpo.phase.reward")
    for span in (phase, step):
        assert span.status.status_code is StatusCode.ERROR and span.status.description == "ValueError"
        (event,) = span.events
        assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"
        assert event.attributes["exception.message"] == "reward model timed out"
        assert 'raise ValueError("reward model timed out")' in event.attributes["exception.stacktrace"]
    (ok,) = captured.spans("grpo.phase.rollout")
    assert ok.status.status_code is StatusCode.UNSET and not ok.events
    skipped = captured.metrics()["grpo.skipped_steps"].data.data_points[0]
    assert skipped.value == 1


def test_step_attributes_tie_a_users_span_to_the_step(captured):
    """The documented way to link spans of one's own to a step: the attributes every span of ours carries."""
    with captured.tel.step(5) as s:
        attributes = s.attributes
    (step,) = captured.spans("grpo.step")
    assert attributes == {"grpo.run_id": "test-run", "grpo.step": 5}
    assert {k: step.attributes[k] for k in attributes} == attributes


def test_sample_events_with_flattened_columns(captured):
    tel = captured.tel
    with tel.step(2) as s:
        s.samples(_rows(20))
    (chunk,) = captured.spans("grpo.samples")
    (step,) = captured.spans("grpo.step")
    assert chunk.parent.span_id == step.context.span_id
    assert chunk.attributes["grpo.run_id"] == "test-run" and chunk.attributes["grpo.step"] == 2
    events = chunk.events
    assert len(events) == 12 and {e.name for e in events} == {"grpo.sample"}
    first = dict(events[0].attributes)
    assert first["selection"] == "top" and first["truncated"] is False
    assert first["reward.format"] == 1.0 and "reward.accuracy" in first
    assert first["prompt"] == f"prompt {first['sample_index']}"
    assert isinstance(first["sample_index"], int) and isinstance(first["completion_length"], int)
    assert [e.attributes["selection"] for e in events] == ["top"] * 4 + ["bottom"] * 4 + ["random"] * 4


def test_an_int_wider_than_int64_is_a_number_in_the_event_not_a_dropped_column(captured):
    """OTLP's ints are int64: a wider one made the encoder drop the column from every event (with a traceback
    logged each time). It goes out as the nearest float (+-inf past a float's range), a list of ints with one
    as floats; ints within int64 stay ints."""
    row = {"prompt": "p", "completion": "c", "reward": 1.0, "id": 2**70, "neg": -(2**64), "huge": 10**400,
           "ids": [1, 2**70], "small": [1, 2], "meta": {"seed": 2**65}, "ok": 2**63 - 1}
    with captured.tel.step(0) as s:
        s.samples([row])
    (event,) = [dict(e.attributes) for sp in captured.spans("grpo.samples") for e in sp.events]
    assert (event["id"], event["neg"], event["huge"], event["meta.seed"]) == (2.0**70, -(2.0**64), math.inf, 2.0**65)
    assert tuple(event["ids"]) == (1.0, 2.0**70) and tuple(event["small"]) == (1, 2) and event["ok"] == 2**63 - 1
    assert isinstance(event["ok"], int) and all(isinstance(v, int) for v in event["small"])


def test_top_and_bottom_k_match_a_full_sort(make_captured):
    cap = make_captured(top_k=5, bottom_k=3, random_k=0)
    rows = _rows(300, seed=3)
    with cap.tel.step(0) as s:
        s.samples(rows)
    events = [e.attributes for sp in cap.spans("grpo.samples") for e in sp.events]
    order = sorted(range(len(rows)), key=lambda i: rows[i]["reward"])
    assert [e["sample_index"] for e in events if e["selection"] == "top"] == order[::-1][:5]
    assert [e["sample_index"] for e in events if e["selection"] == "bottom"] == order[:3]


def test_chunking_beyond_the_sdk_event_limit(make_captured):
    cap = make_captured(top_k=150, bottom_k=40, random_k=10, max_events_per_span=64)
    rows = _rows(400, seed=1)
    with cap.tel.step(4) as s:
        s.samples(rows)
    chunks = sorted(cap.spans("grpo.samples"), key=lambda sp: sp.attributes["grpo.samples.chunk"])
    assert [len(sp.events) for sp in chunks] == [64, 64, 64, 8]
    assert all(sp.dropped_events == 0 for sp in chunks)
    indices = [e.attributes["sample_index"] for sp in chunks for e in sp.events]
    assert len(indices) == len(set(indices)) == 200


def test_long_text_is_truncated_with_marker_and_length(make_captured, caplog):
    cap = make_captured(max_text_chars=100, top_k=1, bottom_k=0, random_k=0)
    long = "x" * 250
    with cap.tel.step(0) as s:
        s.samples([{"prompt": "short", "completion": long, "reward": 1.0, "score_note": None}])
    (event,) = cap.spans("grpo.samples")[0].events
    attrs = event.attributes
    assert attrs["completion"] == "x" * 100 + TRUNCATION_MARKER
    assert attrs["completion_original_length"] == 250 and attrs["truncated"] is True
    assert attrs["prompt"] == "short" and "prompt_original_length" not in attrs
    assert "score_note" not in attrs  # None dropped
    # The spill keeps the full text.
    (line,) = (cap.output_dir / "samples" / "step_0.jsonl").read_text().splitlines()
    assert json.loads(line)["completion"] == long


def test_spill_holds_every_selected_sample(make_captured):
    cap = make_captured(top_k=2, bottom_k=2, random_k=2, seed=7)
    for step in range(3):
        with cap.tel.step(step) as s:
            s.samples(_rows(50, seed=step))
    cap.tel.shutdown()
    for step in range(3):
        lines = [json.loads(x) for x in (cap.output_dir / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        assert len(lines) == 6
        assert {r["run_id"] for r in lines} == {"test-run"} and {r["step"] for r in lines} == {step}
        assert [r["selection"] for r in lines] == ["top", "top", "bottom", "bottom", "random", "random"]
        assert all(r["reward.format"] == 1.0 for r in lines)


def test_spill_directory_removed_mid_run_is_made_again(make_captured):
    cap = make_captured(top_k=0, bottom_k=0, random_k=2, seed=7)
    with cap.tel.step(0) as s:
        s.samples(_rows(5, seed=0))
    assert cap.tel.flush(10)
    shutil.rmtree(cap.output_dir / "samples")  # e.g. a cleanup job on the run directory
    with cap.tel.step(1) as s:
        s.samples(_rows(5, seed=1))
    cap.tel.shutdown()
    assert [p.name for p in (cap.output_dir / "samples").iterdir()] == ["step_1.jsonl"]
    assert len((cap.output_dir / "samples" / "step_1.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("emit_in", ["thread"])  # the log record: in this process
def test_new_column_is_kept_and_warned_once(captured, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        for step in range(4):
            rows = [{"reward": 1.0, "completion": "a"}]
            if step >= 2:
                rows[0]["judge"] = "ok"
            with captured.tel.step(step) as s:
                s.samples(rows)
        assert captured.tel.flush(5)
    warnings = [r for r in caplog.records if "judge" in r.getMessage()]
    assert len(warnings) == 1
    events = [e.attributes for sp in captured.spans("grpo.samples") for e in sp.events]
    assert [e.get("judge") for e in events] == [None, None, "ok", "ok"]


def test_a_single_row_dict_and_odd_values_are_accepted(captured):
    torch = pytest.importorskip("torch")

    with captured.tel.step(0) as s:
        s.samples({"reward": torch.tensor(0.5), "tokens": [1, 2, 3], "meta": {"src": "gsm8k"}, "mixed": [1, "a"]})
    (event,) = captured.spans("grpo.samples")[0].events
    attrs = event.attributes
    assert attrs["reward"] == 0.5 and attrs["tokens"] == (1, 2, 3)
    assert attrs["meta.src"] == "gsm8k" and attrs["mixed"] == '[1, "a"]'


def test_a_row_that_is_not_a_dict_is_refused_at_the_call_and_changes_nothing(captured, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        for step in range(3):
            with captured.tel.step(step) as s:
                s.record({"kl": 0.1})
                s.samples([{"reward": 1.0}])
                with pytest.raises(ValueError, match=r"rows\[1\]: expected a dict, got list"):
                    s.samples([{"reward": 2.0}, ["not", "a", "dict"]])
                with pytest.raises(ValueError, match="rows: expected a dict or a sequence of dicts, got str"):
                    s.samples("not rows")
        captured.tel.flush()
        steps = captured.spans("grpo.step")
        events = [e for sp in captured.spans("grpo.samples") for e in sp.events]
    assert sorted(sp.attributes["grpo.step"] for sp in steps) == [0, 1, 2]
    assert all(sp.attributes["grpo.metric.kl"] == 0.1 for sp in steps)
    assert sorted(e.attributes["reward"] for e in events) == [1.0, 1.0, 1.0]  # the refused calls' rows: none
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_calls_after_shutdown_do_nothing_and_do_not_raise(captured):
    captured.tel.log_metrics(0, {"kl": 0.1})
    captured.tel.shutdown()
    before = len(captured.spans())
    with captured.tel.step(1) as s:
        with s.phase("rollout"):
            s.record({"kl": 0.2})
            s.samples([{"reward": 1.0}])
            s.samples(None)
    captured.tel.log_metrics(2, {"kl": 0.3})
    captured.tel.shutdown()
    assert len(captured.spans()) == before == 1


@pytest.mark.parametrize("emit_in", ["thread"])  # the log record: in this process
def test_a_missing_score_column_keeps_random_samples_and_warns_once(make_captured, caplog):
    cap = make_captured(score="accuracy", top_k=2, bottom_k=2, random_k=3)
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        for step in range(2):
            with cap.tel.step(step) as s:
                s.samples([{"reward": float(i)} for i in range(10)])
        events = [e.attributes for sp in cap.spans("grpo.samples") for e in sp.events]
    assert [e["selection"] for e in events] == ["random"] * 6
    assert len([r for r in caplog.records if "accuracy" in r.getMessage()]) == 1
