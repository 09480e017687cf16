"""Console exporters, and a slow endpoint: shutdown gives up on it instead of hanging."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading

import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings


def test_console_exporters_print_spans_and_metrics(tmp_path):
    # A child process: the SDK's console exporters bind sys.stdout at import, past pytest's capture.
    script = (
        "from otel_grpo.telemetry import Telemetry, TelemetrySettings\n"
        f"s = TelemetrySettings(run_id='console-1', metrics_exporters=['console'], "
        f"traces_exporters=['console'], output_dir={str(tmp_path)!r})\n"
        "tel = Telemetry(s)\ntel.log_metrics(1, {'kl': 0.5})\ntel.shutdown()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True).stdout
    assert '"name": "grpo.step"' in out and '"grpo.metric.kl": 0.5' in out
    assert '"name": "grpo.kl"' in out


class _BlackHole:
    """Accepts connections and reads requests but never answers: an endpoint that hangs."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        for conn in self._conns:
            conn.close()
        self._sock.close()


@pytest.mark.timeout(60)
def test_shutdown_gives_up_on_a_hanging_endpoint(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")  # longer than the shutdown bound
    hole = _BlackHole()
    try:
        settings = TelemetrySettings(
            run_id="slow", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{hole.port}",
            metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=tmp_path,
            top_k=1, bottom_k=1, random_k=0, shutdown_timeout_s=2,
        )
        tel = Telemetry(settings)
        caplog.set_level(logging.INFO, logger="otel_grpo.telemetry")
        for step in range(20):
            with tel.step(step) as s:
                s.record({"kl": 0.1})
                s.samples([{"reward": 0.0, "prompt": "a"}, {"reward": 1.0, "prompt": "b"}])
        tel.shutdown()
    finally:
        hole.close()
    assert any("did not finish within" in r.getMessage() for r in caplog.records)
    for step in range(20):
        rows = [json.loads(x) for x in (tmp_path / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        assert [r["prompt"] for r in rows] == ["b", "a"]
