"""How long `Telemetry.finish()` takes when the OTLP endpoint is down, against a live one.

    .venv/bin/python benchmarks/exit.py [--repeat 3] [--steps 20] [--emit-in thread|process]

Each trial is a fresh `Telemetry` exporting traces and metrics over OTLP/HTTP (the default
protocol): `--steps` steps with samples, then `flush(1.0)` and `finish()`, each timed. Down: a closed port on
127.0.0.1. Live (the peer): a local HTTP server answering every OTLP export with 200. With
the endpoint down the exporters would retry their last batch for the whole export timeout
(10 s by default) before the process could exit. With `--emit-in process` the timed
`finish()` includes the telemetry process's shutdown and exit.
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


def _trial(endpoint: str, steps: int, emit_in: str) -> tuple[float, float, bool]:
    """(seconds in `flush(1.0)`, seconds in `finish()` after it, what flush returned)."""
    with tempfile.TemporaryDirectory() as out:
        tel = Telemetry(TelemetrySettings(
            run_id="exit-bench", otlp_protocol="http/protobuf", otlp_endpoint=endpoint,
            metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=out, emit_in=emit_in))
        for step in range(steps):
            with tel.step(step) as s:
                s.record({"kl": 0.01 * step, "reward": 0.5})
                s.samples([{"prompt": f"p{step}", "completion": "c", "reward": i / 8} for i in range(8)])
        start = time.perf_counter()
        flushed = tel.flush(1.0)
        flush_s = time.perf_counter() - start
        start = time.perf_counter()
        tel.finish()
        return flush_s, time.perf_counter() - start, flushed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--emit-in", choices=["thread", "process"], default="thread")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    live = f"http://127.0.0.1:{server.server_address[1]}"
    down, up = [], []
    for _ in range(args.repeat):
        down.append(_trial(f"http://127.0.0.1:{_closed_port()}", args.steps, args.emit_in))
        up.append(_trial(live, args.steps, args.emit_in))
    server.shutdown()
    for what, i in (("flush(1.0)", 0), ("finish()", 1)):
        d, u = statistics.median(t[i] for t in down), statistics.median(t[i] for t in up)
        print(f"{what} with the endpoint down: median {d:.2f} s ({', '.join(f'{t[i]:.2f}' for t in down)})"
              + (f", returned {sorted({t[2] for t in down})}" if i == 0 else ""))
        print(f"{what} with a live endpoint:   median {u:.2f} s ({', '.join(f'{t[i]:.2f}' for t in up)})")
        print(f"{what} ratio down / live: {d / u:.1f}")


if __name__ == "__main__":
    main()
