"""What reaches an InMemoryMetricReader: names, units, attributes, buckets, counters, non-finite values."""

from __future__ import annotations

import bisect
import json
import logging
import math

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum

from otel_grpo.catalog import get
from otel_grpo.signals import ReducedStats
from otel_grpo.telemetry import _clock as clock


def test_gauges_use_catalog_names_units_and_run_id(captured):
    with captured.tel.step(0) as s:
        s.record(ReducedStats({"kl": 0.25, "reward": 0.5, "reward_fn_mean/format": 0.75}))
    metrics = captured.metrics()
    for key in ("kl", "reward", "reward_fn_mean"):
        signal = get(key)
        metric = metrics[signal.name]
        assert isinstance(metric.data, Gauge)
        assert metric.unit == signal.unit
    assert [p.value for p in metrics["grpo.kl"].data.data_points] == [0.25]
    (fmt,) = metrics["grpo.reward_fn.mean"].data.data_points
    assert dict(fmt.attributes) == {"run_id": "test-run", "reward_fn": "format"}
    for metric in metrics.values():
        for point in metric.data.data_points:
            assert point.attributes["run_id"] == "test-run", metric.name


def test_the_process_start_is_exported_before_any_step(make_captured):
    """The alerts tell a run that hangs or dies before its first step by it (GRPONoFirstStep)."""
    import time

    before = int(time.time())
    captured = make_captured()
    metrics = captured.metrics()  # no step yet
    (start,) = metrics["grpo.process.start_time"].data.data_points
    assert before <= start.value <= time.time() and dict(start.attributes) == {"run_id": "test-run"}
    assert "grpo.step_index" not in metrics
    (running,) = metrics["grpo.run.finished"].data.data_points  # running from the start: a relaunch is live
    assert running.value == 0.0
    with captured.tel.step(0):
        pass
    (still,) = captured.metrics()["grpo.process.start_time"].data.data_points
    assert still.value == start.value


def test_a_heartbeat_exports_the_time_of_work_between_steps_and_nothing_else(make_captured):
    """The stall alerts count from the later of the last step and the last heartbeat (an evaluation batch)."""
    import time

    captured = make_captured()
    with captured.tel.step(0):
        pass
    before = clock.now_s()  # the process's clock, which every time it exports is on
    captured.tel.heartbeat()
    metrics = captured.metrics()
    (beat,) = metrics["grpo.process.activity_time"].data.data_points
    assert before <= beat.value <= clock.now_s() and dict(beat.attributes) == {"run_id": "test-run"}
    # work, not a step: no step index, counter or span moves
    assert [p.value for p in metrics["grpo.step_index"].data.data_points] == [0.0]
    assert [p.value for p in metrics["grpo.steps"].data.data_points] == [1]
    assert len(captured.spans("grpo.step")) == 1
    # an evaluation's every batch may beat: one a second reaches the exporter
    for _ in range(1000):
        captured.tel.heartbeat()
    (same,) = captured.metrics()["grpo.process.activity_time"].data.data_points
    assert same.value == beat.value
    time.sleep(1.05)
    captured.tel.heartbeat()
    (later,) = captured.metrics()["grpo.process.activity_time"].data.data_points
    assert later.value >= beat.value + 1


def test_gauges_hold_the_latest_value_per_attribute_set(captured):
    for step, kl in enumerate([0.1, 0.2, 0.3]):
        with captured.tel.step(step) as s:
            s.record({"kl": kl, "rewards/acc/mean": step})
    metrics = captured.metrics()
    assert [p.value for p in metrics["grpo.kl"].data.data_points] == [0.3]
    # Nothing recorded since: the value is still there at the next collection.
    again = captured.metrics()
    assert [p.value for p in again["grpo.kl"].data.data_points] == [0.3]
    assert [p.value for p in again["grpo.reward_fn.mean"].data.data_points] == [2.0]
    assert [p.value for p in again["grpo.step_index"].data.data_points] == [2.0]


def test_two_names_of_one_signal_share_its_series_and_the_newest_value_wins(captured):
    """`entropy` and verl's `actor/entropy` are one series: one data point, the last value set."""
    captured.tel.log_metrics(1, {"entropy": 1.5})
    captured.tel.log_metrics(2, {"actor/entropy": 0.7})
    assert [p.value for p in captured.metrics()["grpo.policy.entropy"].data.data_points] == [0.7]
    captured.tel.log_metrics(3, {"entropy": 0.4})
    assert [p.value for p in captured.metrics()["grpo.policy.entropy"].data.data_points] == [0.4]


def test_trl_and_verl_aliases_map_to_catalog_instruments(captured):
    captured.tel.log_metrics(3, {"clip_ratio/high_mean": 0.02, "actor/entropy": 1.5, "rewards/format/mean": 0.9})
    metrics = captured.metrics()
    assert metrics["grpo.clip_ratio.high"].data.data_points[0].value == 0.02
    assert metrics["grpo.policy.entropy"].data.data_points[0].value == 1.5
    assert dict(metrics["grpo.reward_fn.mean"].data.data_points[0].attributes)["reward_fn"] == "format"
    assert not any(name.startswith("grpo.extra.") for name in metrics)


def test_unknown_keys_become_sanitized_extra_gauges(captured):
    captured.tel.log_metrics(1, {"train/My-Metric": 7, "KL": 0.5})
    metrics = captured.metrics()
    extra = metrics["grpo.extra.train_my_metric"]
    assert extra.unit == "{value}" and extra.data.data_points[0].value == 7.0
    assert metrics["grpo.kl"].data.data_points[0].value == 0.5  # sanitized "kl" is a catalog key


def test_names_that_sanitize_alike_are_two_series_not_one(capfd, caplog, make_captured):
    """`a/b` and `a_b` (or two names alike in their first 200 characters) both sanitize to one name: each keeps its
    own value in its own gauge and step-row column, the name that is its own key the plain one whichever came
    first (`a/b` alone at step 1 has it until `a_b` comes), the other marked with its name's hash; said once."""
    captured = make_captured()  # made here, under capfd: the process sink's child writes to the stderr it gets
    long_a, long_b = "x" * 250 + "a", "x" * 250 + "b"
    captured.tel.log_metrics(1, {"a/b": 1.0, long_a: 3.0})
    captured.tel.log_metrics(2, {"a/b": 2.0, "a_b": 4.0, long_a: 3.0, long_b: 5.0})
    metrics = captured.metrics()
    extras = {name: metric.data.data_points[0].value for name, metric in metrics.items() if name.startswith("grpo.extra.")}
    assert len(extras) == 4 and extras["grpo.extra.a_b"] == 4.0 and sorted(extras.values()) == [2.0, 3.0, 4.0, 5.0]
    (marked,) = [name for name in extras if name.startswith("grpo.extra.a_b_")]
    assert extras[marked] == 2.0 and metrics[marked].description == "Metric 'a/b' logged by the trainer; not in the otel-grpo catalog."
    assert all(len(name) <= 200 for name in extras)
    (row,) = [span.attributes for span in captured.spans("grpo.step") if span.attributes["grpo.step"] == 2]
    columns = {k: v for k, v in row.items() if k.startswith(("grpo.metric.a_b", "grpo.metric.x"))}
    assert columns["grpo.metric.a_b"] == 4.0 and sorted(columns.values()) == [2.0, 3.0, 4.0, 5.0]
    child = {line.removeprefix("otel-grpo: ") for line in capfd.readouterr().err.splitlines()}  # the process sink's
    said = sorted(m for m in {r.getMessage().removeprefix("otel-grpo: ") for r in caplog.records} | child
                  if "both export as" in m)
    assert len(said) == 2 and "'a_b' and 'a/b' both export as grpo.extra.a_b; 'a/b' exports as grpo.extra.a_b_" in said[0]


def test_per_sample_histograms_use_catalog_buckets(captured):
    rewards = [0.0, 0.05, 0.5, 1.0, 1.0, 3.0]
    with captured.tel.step(0) as s:
        s.record(ReducedStats({"reward": 0.9}, samples={"sample_reward": rewards, "sample_completion_length": [3.0, 700.0]}))
    metrics = captured.metrics()
    signal = get("sample_reward")
    hist = metrics[signal.name]
    assert isinstance(hist.data, Histogram) and hist.unit == signal.unit
    (point,) = hist.data.data_points
    assert tuple(point.explicit_bounds) == signal.buckets
    assert point.count == len(rewards) and math.isclose(point.sum, sum(rewards))
    assert dict(point.attributes) == {"run_id": "test-run"}
    # 0.05 falls in (0.0, 0.1]: bucket index 5 of the boundaries.
    assert point.bucket_counts[signal.buckets.index(0.1)] == 1
    lengths = metrics["grpo.sample.completion_length"].data.data_points[0]
    assert tuple(lengths.explicit_bounds) == get("sample_completion_length").buckets


def test_phase_durations_histogram_and_counters(captured):
    for step in range(3):
        with captured.tel.step(step) as s:
            with s.phase("rollout"):
                pass
            with s.phase("update"):
                pass
            s.record({"tokens": 100, "samples": 8})
    metrics = captured.metrics()
    phase = metrics["grpo.phase.duration"]
    assert phase.unit == "s"
    by_phase = {p.attributes["phase"]: p for p in phase.data.data_points}
    assert set(by_phase) == {"rollout", "update"} and by_phase["rollout"].count == 3
    assert tuple(by_phase["rollout"].explicit_bounds) == get("phase_duration").buckets
    for name, total in (("grpo.steps", 3), ("grpo.tokens", 300), ("grpo.samples", 24)):
        assert isinstance(metrics[name].data, Sum) and metrics[name].data.is_monotonic
        assert metrics[name].data.data_points[0].value == total, name


def test_phases_of_several_trainer_steps_in_one_record_each_count(captured):
    """A logged step that covers several trainer steps (TRL's logging_steps > 1) reports each phase once per
    trainer step: every duration lands in the histogram, with its own bucket, and the spilled step sums them."""
    with captured.tel.step(10) as s:
        for seconds in (0.004, 0.3, 7.0):
            s.record_phase("update", seconds)
        s.record_phase("rollout", 2.0)
    points = {p.attributes["phase"]: p for p in captured.metrics()["grpo.phase.duration"].data.data_points}
    update = points["update"]
    assert (update.count, update.min, update.max) == (3, 0.004, 7.0)
    assert update.sum == pytest.approx(7.304)
    bounds = list(update.explicit_bounds)
    expected = [0] * (len(bounds) + 1)
    for seconds in (0.004, 0.3, 7.0):
        expected[bisect.bisect_left(bounds, seconds)] += 1
    assert list(update.bucket_counts) == expected
    assert points["rollout"].count == 1 and points["rollout"].sum == 2.0
    # the spilled step row (what `otel-grpo replay` rebuilds the sidecar's from) sums them per phase
    (steps,) = captured.output_dir.rglob("steps.jsonl")
    phases = json.loads(steps.read_text().splitlines()[-1])["phases"]
    assert phases == {"update": pytest.approx(7.304), "rollout": 2.0}


def test_nonfinite_values_are_counted_not_exported(captured):
    with captured.tel.step(0) as s:
        s.record({"kl": 0.1})
    with captured.tel.step(1) as s:
        s.record(ReducedStats({"kl": math.nan, "loss": math.inf}, samples={"sample_advantage": [0.5, math.nan, -math.inf]}))
    metrics = captured.metrics()
    assert "grpo.kl" not in metrics  # absent at step 1: not the last finite value, no data point
    assert "grpo.loss" not in metrics
    counts = {p.attributes["signal"]: p.value for p in metrics["grpo.nonfinite"].data.data_points}
    assert counts == {"kl": 1, "loss": 1, "sample_advantage": 2, "grad_norm": 0}
    assert metrics["grpo.sample.advantage"].data.data_points[0].count == 1
    (step1,) = [s for s in captured.spans("grpo.step") if s.attributes["grpo.step"] == 1]
    assert math.isnan(step1.attributes["grpo.metric.kl"])  # the sidecar's null, in place of step 0's value


def test_the_counters_that_page_exist_at_zero_from_the_start(captured):
    """A Prometheus that first sees a run mid-flight (a restart that lost its storage) counts an event as the
    increase of a series it saw at 0: skipped steps and the non-finite counts of the signals that stop training
    (GRPONonFiniteValues pages for them) exist from the process's start, as the step evidence's counters from a
    scalar's first step. A series first seen above 0 may hold an event hours old, so the alerts count it only once
    Prometheus has watched the run for `counter_window`: a NaN loss soon after such a restart paged minutes late.
    Other signals count from their first non-finite value, as before (a zero series each would crowd the panel)."""
    with captured.tel.step(0) as s:
        s.record(ReducedStats({"kl": 0.1}, samples={"sample_advantage": [0.5]}))
    metrics = captured.metrics()
    counts = {p.attributes["signal"]: p.value for p in metrics["grpo.nonfinite"].data.data_points}
    assert counts == {"loss": 0, "grad_norm": 0}
    assert [p.value for p in metrics["grpo.skipped_steps"].data.data_points] == [0]


def test_skipped_steps_and_failed_steps_are_counted(captured):
    with captured.tel.step(0) as s:
        s.skip()
    try:
        with captured.tel.step(1):
            raise RuntimeError("bad batch")
    except RuntimeError:
        pass
    metrics = captured.metrics()
    assert metrics["grpo.skipped_steps"].data.data_points[0].value == 2
    failed = [s for s in captured.spans("grpo.step") if s.attributes["grpo.step"] == 1][0]
    assert failed.status.status_code.name == "ERROR"


def test_non_numeric_values_are_dropped_without_raising(captured):
    with captured.tel.step(0) as s:
        s.record({"kl": 0.1, "note": "hello", "loss": None})
    metrics = captured.metrics()
    assert metrics["grpo.kl"].data.data_points[0].value == 0.1
    assert "grpo.loss" not in metrics and "grpo.extra.note" not in metrics


def test_log_metrics_counts_progress_between_calls(captured):
    captured.tel.log_metrics(10, {"kl": 0.1})
    captured.tel.log_metrics(20, {"kl": 0.1})
    captured.tel.log_metrics(20, {"kl": 0.1})
    metrics = captured.metrics()
    assert metrics["grpo.steps"].data.data_points[0].value == 11  # 1 (first call) + 10
    assert metrics["grpo.step_index"].data.data_points[0].value == 20


def test_rank_attribute_only_when_every_rank_exports(make_captured, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    quiet = make_captured()
    with quiet.tel.step(0) as s:
        s.record({"kl": 0.1})
        s.samples([{"reward": 1.0}])
    assert not quiet.tel.exporting
    assert quiet.spans() == []
    assert quiet.metrics() == {}
    assert not quiet.output_dir.exists()
    loud = make_captured(export_all_ranks=True)
    with loud.tel.step(0) as s:
        s.record({"kl": 0.1})
        s.samples([{"reward": 1.0}])
    (point,) = loud.metrics()["grpo.kl"].data.data_points
    assert dict(point.attributes) == {"run_id": "test-run", "rank": 1}
    assert [p.name for p in (loud.output_dir / "samples").iterdir()] == ["step_0_rank1.jsonl"]


def test_negative_per_sample_values_reach_signed_histograms(captured, caplog):
    # The SDK's Histogram.record drops negatives; advantages and rewards are signed.
    advantages = [-2.5, -0.75, -0.1, 0.0, 0.3, 1.2]
    with caplog.at_level(logging.WARNING):
        with captured.tel.step(0) as s:
            s.record(ReducedStats({}, samples={"sample_advantage": advantages, "sample_reward": [-1.0, 1.0]}))
        metrics = captured.metrics()
    assert not [r for r in caplog.records if "non-negative" in r.getMessage()]
    (point,) = metrics["grpo.sample.advantage"].data.data_points
    assert point.count == 6 and math.isclose(point.sum, sum(advantages))
    assert point.min == -2.5 and point.max == 1.2
    bounds = get("sample_advantage").buckets
    expected = [0] * (len(bounds) + 1)
    for value in advantages:
        expected[next((i for i, b in enumerate(bounds) if value <= b), len(bounds))] += 1
    assert list(point.bucket_counts) == expected
    assert metrics["grpo.sample.reward"].data.data_points[0].count == 2


class _MeterWithoutSyncGauge:
    """A real SDK meter seen through the API of SDKs before synchronous gauges (no `create_gauge`)."""

    def __init__(self, meter) -> None:
        self._meter = meter

    def __getattr__(self, name):
        if name == "create_gauge":
            raise AttributeError(name)
        return getattr(self._meter, name)


class _ProviderWithoutSyncGauge:
    def __init__(self, provider) -> None:
        self._provider = provider

    def get_meter(self, *args, **kwargs):
        return _MeterWithoutSyncGauge(self._provider.get_meter(*args, **kwargs))

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        return self._provider.force_flush(timeout_millis)


def test_observable_gauges_where_the_sdk_has_no_synchronous_ones(tmp_path):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    reader = InMemoryMetricReader()
    provider = _ProviderWithoutSyncGauge(MeterProvider(metric_readers=[reader]))
    settings = TelemetrySettings(run_id="old-sdk", output_dir=tmp_path, traces_exporters=["none"])
    tel = Telemetry(settings, meter_provider=provider)
    try:
        tel.log_metrics(0, {"kl": 0.1, "rewards/a/mean": 1.0, "rewards/b/mean": 2.0})
        tel.log_metrics(1, {"kl": 0.2, "rewards/a/mean": 1.5})  # b: absent at step 1
        assert tel.flush(5)
        for _ in range(2):  # the latest step's value per attribute set, at every collection
            data = reader.get_metrics_data()
            metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
            assert [p.value for p in metrics["grpo.kl"].data.data_points] == [0.2]
            by_fn = {p.attributes["reward_fn"]: p.value for p in metrics["grpo.reward_fn.mean"].data.data_points}
            assert by_fn == {"a": 1.5}
    finally:
        tel.shutdown()
