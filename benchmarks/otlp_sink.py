"""An OTLP/HTTP endpoint that reads and discards every request, as a collector would accept.

    proc, port = start_sink()      # a separate process, so its CPU is not counted as ours
    ...
    proc.terminate()

Run directly (`python benchmarks/otlp_sink.py`), it serves on a free port and prints it.
"""

from __future__ import annotations

import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def start_sink() -> tuple[subprocess.Popen, int]:
    """The sink in its own process; its port once it listens."""
    proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    print(server.server_address[1], flush=True)
    server.serve_forever()
