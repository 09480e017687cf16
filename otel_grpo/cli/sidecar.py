"""`otel-grpo sidecar`: run the FastAPI sidecar under uvicorn."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer

from .._extras import require
from ._app import app
from ._paths import os_error_line, path_problem


@app.command()
def sidecar(
    host: Optional[str] = typer.Option(None, help="Bind address (default 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, help="Port (default 8000)."),
    db: Optional[Path] = typer.Option(None, help="SQLite database path (default otel-grpo-sidecar.db)."),
    token: Optional[str] = typer.Option(None, help="Bearer token required for ingest (traces, alerts)."),
    read_token: Optional[str] = typer.Option(None, help="Bearer token required for the read API."),
    allow_unauthenticated: bool = typer.Option(
        False, "--allow-unauthenticated",
        help="Listen beyond loopback without both tokens (refused otherwise: anyone reaching it could write and read)."),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Run the sidecar: OTLP/HTTP ingest on /v1/traces, API on /api, web page on /.

    Every setting can also come from the environment (OTEL_GRPO_SIDECAR_HOST, _PORT, _DB,
    _TOKEN, _READ_TOKEN, _ALLOW_UNAUTHENTICATED, _MAX_BODY_BYTES, _INGEST_WORKERS (ingest processes, default 2;
    0: in the server process), _ALLOWED_HOSTS, _RETENTION_MAX_RUNS, ...); flags win.

    Only requests whose Host is an IP address, localhost or a single-label name are served
    (DNS-rebinding guard); list other names in OTEL_GRPO_SIDECAR_ALLOWED_HOSTS. Listening
    beyond loopback needs both tokens, or --allow-unauthenticated to say an open sidecar is
    intended (it then warns). A database that cannot be opened is one error line and
    exit code 1; an existing one on a full disk is served read-only.
    """
    require("sidecar", "otel-grpo sidecar")
    import uvicorn

    from otel_grpo.sidecar import SidecarSettings, create_app
    from otel_grpo.sidecar._heap import keep_freed_heap
    from otel_grpo.sidecar._settings import loopback_only

    given = {"host": host, "port": port, "db": db, "ingest_token": token, "read_token": read_token,
             "allow_unauthenticated": allow_unauthenticated or None}
    try:
        settings = SidecarSettings(**{k: v for k, v in given.items() if v is not None})
    except ValueError as e:  # pydantic's ValidationError is one
        _fail(f"invalid sidecar settings: {_first_error(e)}")
    _check_db(settings.db)
    _check_port(settings.host, settings.port)
    if not loopback_only(settings.host) and not (settings.ingest_token and settings.read_token):
        typer.echo(f"warning: the sidecar listens on {settings.host} without both tokens, as allowed: anyone who "
                   "reaches it can read samples or write runs (browsers are held off by the Host check, see "
                   "OTEL_GRPO_SIDECAR_ALLOWED_HOSTS)", err=True)
    keep_freed_heap()  # this process serves the sidecar only; see _heap for the measured why
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=log_level,
                access_log=False, timeout_graceful_shutdown=5)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _first_error(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(x) for x in first['loc'])}: {first['msg']}"
    return str(e)


def _check_db(path: Path) -> None:
    """Open the store once before serving: an unwritable path is one line, not uvicorn's traceback."""
    import sqlite3

    from otel_grpo.sidecar.store import Store

    # an existing database file may be served read-only: only a new one must be creatable
    problem = path_problem(path, "--db") if not path.is_file() else None
    if problem:
        _fail(f"cannot create the sidecar database: {problem}")
    try:
        Store.open(path).close()
    except OSError as e:
        _fail(f"cannot open the sidecar database: {os_error_line(e, path, '--db')}")
    except sqlite3.Error as e:
        _fail(f"cannot open the sidecar database {str(path)!r}: {e}")


def _check_port(host: str, port: int) -> None:
    """A port in use is one line before uvicorn starts (its error came among INFO lines, exit 3)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as e:
            _fail(f"cannot listen on {host}:{port}: {e.strerror or e} (another sidecar? choose --port)")
