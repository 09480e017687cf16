"""The collector is down for the whole run: training finishes, one warning, the spill is complete,
and other users of the OTel SDK in the process keep their own log records."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time

import pytest

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from .conftest import free_port


def test_200_steps_against_a_closed_port(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # the SDK's per-request deadline, in seconds
    closed = free_port()
    settings = TelemetrySettings(
        run_id="down", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{closed}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], metric_export_interval_ms=100,
        output_dir=tmp_path, top_k=3, bottom_k=3, random_k=2, shutdown_timeout_s=4,
    )
    caplog.set_level(logging.WARNING)
    tel = Telemetry(settings)
    for step in range(200):
        with tel.step(step) as s:
            with s.phase("rollout"):
                pass
            s.record({"kl": 0.01 * step, "reward": 0.5, "tokens": 64})
            s.samples([{"prompt": f"{step}-{i}", "completion": "x", "reward": (i * 7 % 16) / 16} for i in range(16)])
    tel.shutdown()

    assert tel.export_health.failures >= 1
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(("opentelemetry", "otel_grpo"))]
    assert len(noisy) == 1, [r.getMessage() for r in noisy]
    assert "failed" in noisy[0].getMessage() and f":{closed}" in noisy[0].getMessage()

    files = sorted((tmp_path / "samples").glob("step_*.jsonl"))
    assert len(files) == 200
    for step in (0, 99, 199):
        rows = [json.loads(line) for line in (tmp_path / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        kept = 16 if 0.01 * step > 1.0 else 8  # a step whose KL crosses the threshold keeps every row
        assert len(rows) == kept
        assert {r["prompt"].split("-")[0] for r in rows} == {str(step)}
        assert len({r["sample_index"] for r in rows}) == kept


def test_flush_says_false_when_its_timeout_passes_on_a_dead_endpoint(tmp_path):
    """The SDK's own force_flush retries a dead endpoint for its whole export timeout (10 s) and then
    reports success; `flush(timeout)` answers within its timeout that the data did not go out."""
    settings = TelemetrySettings(
        run_id="down-flush", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{free_port()}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=tmp_path,
    )
    tel = Telemetry(settings)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
        s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
    assert tel.flush(0.5) is False
    tel.shutdown()
    assert (tmp_path / "samples" / "step_0.jsonl").exists()


class _UserMetricExporter(MetricExporter):
    """Another SDK user's exporter in the same process, which fails its own way."""

    def __init__(self) -> None:
        super().__init__()

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
        raise ConnectionError("the user's own backend is down")

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


def test_while_ours_fail_other_sdk_users_logs_still_appear(tmp_path, monkeypatch, caplog):
    """Only the SDK records made inside our own export calls are held back, never another user's."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    settings = TelemetrySettings(
        run_id="down-other", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{free_port()}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=tmp_path, shutdown_timeout_s=4,
    )
    caplog.set_level(logging.WARNING)
    tel = Telemetry(settings)
    user_spans = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{free_port()}/v1/traces")
    user_provider = MeterProvider(metric_readers=[
        PeriodicExportingMetricReader(_UserMetricExporter(), export_interval_millis=3_600_000)
    ])
    try:
        tel.log_metrics(0, {"kl": 0.1})
        tel.flush(3)
        assert tel.export_health.failing  # ours fail: the state in which the SDK was muted process-wide
        user_provider.get_meter("user").create_counter("user.requests").add(1)
        user_provider.force_flush(5_000)  # the SDK's reader logs the user's exporter's exception
        user_spans.shutdown()
        user_spans.export([])  # the SDK's OTLP exporter warns: already shut down
    finally:
        user_provider.shutdown()
        tel.shutdown()
    sdk_records = {(r.name, r.getMessage()) for r in caplog.records if r.name.startswith("opentelemetry")}
    # the user's two, and nothing from our own failing exports
    assert sdk_records == {
        ("opentelemetry.sdk.metrics._internal.export", "Exception while exporting metrics"),
        ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "Exporter already shutdown, ignoring batch"),
    }
    ours = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("otel_grpo")]
    assert len(ours) == 1 and "failed" in ours[0].getMessage()


def test_an_endpoint_that_takes_the_connection_and_never_answers_is_one_warning(tmp_path, monkeypatch, caplog):
    """A black hole (a wedged collector, a proxy that holds the connection): every export waits its whole
    timeout, the span queue fills and the SDK says "Queue full, dropping Span." every 20 s for the whole run.
    That is the run's one export warning; training does not wait, the spill is complete, `finish()` keeps
    its bound."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16")  # full within a few steps, as a fast loop fills 2048
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)  # the kernel completes the handshakes; nothing ever reads the requests
        settings = TelemetrySettings(
            run_id="black-hole", otlp_protocol="http/protobuf",
            otlp_endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}", metrics_exporters=["none"],
            traces_exporters=["otlp"], output_dir=tmp_path, top_k=2, bottom_k=0, random_k=0, shutdown_timeout_s=1.5,
        )
        caplog.set_level(logging.WARNING)
        tel = Telemetry(settings)
        started = time.monotonic()
        for step in range(40):
            with tel.step(step) as s:
                with s.phase("rollout"):
                    pass
                s.samples([{"prompt": f"{step}-{i}", "completion": "x", "reward": i / 4} for i in range(4)])
        stepped = time.monotonic() - started
        started = time.monotonic()
        tel.finish()
        finished = time.monotonic() - started

    assert stepped < 5 and finished < 1.5 + 1.0, (stepped, finished)
    said = [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith(("opentelemetry", "otel_grpo"))]
    assert len(said) == 1 and "span queue is full" in said[0], said
    assert "samples stay in the local spill" in said[0]
    assert len(list((tmp_path / "samples").glob("step_*.jsonl"))) == 40


_BLACK_HOLE_RUN = """
import sys
from otel_grpo.telemetry import Telemetry, TelemetrySettings
tel = Telemetry(TelemetrySettings(
    run_id="short-black-hole", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{sys.argv[1]}",
    metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=sys.argv[2], emit_in=sys.argv[3],
    shutdown_timeout_s=2.0, top_k=2, bottom_k=0, random_k=0))
for step in range(3):
    with tel.step(step) as s:
        s.samples([{"prompt": f"{step}-{i}", "completion": "x", "reward": i / 4} for i in range(4)])
tel.finish()
"""


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_short_run_into_a_black_hole_says_its_samples_stay_in_the_spill(tmp_path, emit_in):
    """Too short for any export to time out (the bound at the end is below the OTLP timeout): the exporters do
    not finish, and that is the run's one export warning, naming where the samples stay, from either sink."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        done = subprocess.run([sys.executable, "-c", _BLACK_HOLE_RUN, str(hole.getsockname()[1]), str(tmp_path),
                               emit_in], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = done.stderr.splitlines()  # what reaches stderr: warnings (logging's last resort), not info
    assert len(said) == 1 and "no answer within" in said[0] and "samples stay in the local spill" in said[0], said
    assert len(list((tmp_path / "samples").glob("step_*.jsonl"))) == 3


def test_a_reader_that_runs_out_of_time_at_the_end_leaves_no_traceback_and_the_endpoint_closed(tmp_path, caplog):
    """An OTLP endpoint that takes connections and never answers holds the first metric reader's last export for
    the whole of the end's time, so the meter provider's shutdown raises for the next reader ("deadline already
    exceeded"). That exception escaped the closing thread: a traceback at the end of the run, and the pull
    endpoint's server, closed after the readers, stayed open."""
    from otel_grpo.telemetry._exporters import Exporters

    escaped = []
    before = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    try:
        with socket.socket() as hole:
            hole.bind(("127.0.0.1", 0))
            hole.listen(64)
            settings = TelemetrySettings(run_id="wedged", output_dir=tmp_path, metrics_exporters=["otlp", "prometheus"],
                                         traces_exporters=["none"], otlp_protocol="http/protobuf",
                                         otlp_endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}", prometheus_port=0)
            exporters = Exporters(settings, 0, 1, 0)
            exporters.meter_provider.get_meter("t").create_gauge("g").set(1.0)
            port = exporters.prometheus_port
            with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
                exporters.close(0.5, linger=False)
            endpoint = f"http://127.0.0.1:{hole.getsockname()[1]}/v1/metrics"  # what did not answer, not "none"
            # The run's one export warning (which of its failures comes first depends on the machine's load)
            # names the endpoint that did not answer
            said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("otel-grpo: exporting")]
            assert len(said) <= 1 and all(m.startswith(f"otel-grpo: exporting telemetry to {endpoint} failed")
                                          for m in said), said
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the closing goes on past the bound, on its own thread
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"the pull endpoint on port {port} is still open")
    finally:
        threading.excepthook = before
    assert escaped == []
