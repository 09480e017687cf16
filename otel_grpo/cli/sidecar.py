"""`otel-grpo sidecar`: run the FastAPI sidecar under uvicorn."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._app import app


@app.command()
def sidecar(
    host: Optional[str] = typer.Option(None, help="Bind address (default 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, help="Port (default 8000)."),
    db: Optional[Path] = typer.Option(None, help="SQLite database path (default otel-grpo-sidecar.db)."),
    token: Optional[str] = typer.Option(None, help="Bearer token required for ingest (traces, alerts)."),
    read_token: Optional[str] = typer.Option(None, help="Bearer token required for the read API."),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Run the sidecar: OTLP/HTTP ingest on /v1/traces, API on /api, web page on /.

    Every setting can also come from the environment (OTEL_GRPO_SIDECAR_HOST, _PORT, _DB,
    _TOKEN, _READ_TOKEN, _MAX_BODY_BYTES, _INGEST_WORKERS (ingest processes, default 2;
    0: in the server process), _RETENTION_MAX_RUNS, ...); flags win.
    """
    import uvicorn

    from otel_grpo.sidecar import SidecarSettings, create_app
    from otel_grpo.sidecar._heap import keep_freed_heap

    keep_freed_heap()  # this process serves the sidecar only; see _heap for the measured why
    given = {"host": host, "port": port, "db": db, "ingest_token": token, "read_token": read_token}
    settings = SidecarSettings(**{k: v for k, v in given.items() if v is not None})
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=log_level,
                access_log=False, timeout_graceful_shutdown=5)
