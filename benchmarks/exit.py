"""How long `Telemetry.finish()` takes when the OTLP endpoint is down, against a live one.

    .venv/bin/python benchmarks/exit.py [--repeat 3] [--steps 20]

Each trial is a fresh `Telemetry` exporting traces and metrics over OTLP/HTTP (the default
protocol): `--steps` steps with samples, then `finish()`, timed. Down: a closed port on
127.0.0.1. Live (the peer): a local HTTP server answering every OTLP export with 200. With
the endpoint down the exporters would retry their last batch for the whole export timeout
(10 s by default) before the process could exit.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from otel_grpo.telemetry import Telemetry, TelemetrySettings


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trial(endpoint: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        tel = Telemetry(TelemetrySettings(
            run_id="exit-bench", otlp_protocol="http/protobuf", otlp_endpoint=endpoint,
            metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=out))
        for step in range(steps):
            with tel.step(step) as s:
                s.record({"kl": 0.01 * step, "reward": 0.5})
                s.samples([{"prompt": f"p{step}", "completion": "c", "reward": i / 8} for i in range(8)])
        start = time.perf_counter()
        tel.finish()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    live = f"http://127.0.0.1:{server.server_address[1]}"
    down, up = [], []
    for _ in range(args.repeat):
        down.append(_trial(f"http://127.0.0.1:{_closed_port()}", args.steps))
        up.append(_trial(live, args.steps))
    server.shutdown()
    d, u = statistics.median(down), statistics.median(up)
    print(f"finish() with the endpoint down: median {d:.2f} s ({', '.join(f'{x:.2f}' for x in down)})")
    print(f"finish() with a live endpoint:   median {u:.2f} s ({', '.join(f'{x:.2f}' for x in up)})")
    print(f"ratio down / live: {d / u:.1f}")


if __name__ == "__main__":
    main()
