"""`otel-grpo sidecar`: run the FastAPI sidecar under uvicorn."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .._extras import require
from ._app import app, fail, warn
from ._paths import os_error_line, path_problem


@app.command()
def sidecar(
    host: Optional[str] = typer.Option(None, help="Bind address (default 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, help="Port (default 8000)."),
    db: Optional[str] = typer.Option(None, help="SQLite database path (default otel-grpo-sidecar.db), or "
                                     "postgresql://user:pass@host:port/db to share a PostgreSQL database between replicas."),
    token: Optional[str] = typer.Option(None, help="Bearer token required for ingest (traces, alerts)."),
    read_token: Optional[str] = typer.Option(None, help="Bearer token required for the read API."),
    log_file: Optional[str] = typer.Option(None, help="Log to this file, rotated at OTEL_GRPO_SIDECAR_LOG_MAX_BYTES "
                                           "(10 MiB; 3 backups), instead of stderr."),
    allow_unauthenticated: bool = typer.Option(
        False, "--allow-unauthenticated",
        help="Listen beyond loopback without both tokens (refused otherwise: anyone reaching it could write and read)."),
    log_level: str = typer.Option("info", help="uvicorn log level: critical, error, warning, info, debug or trace."),
) -> None:
    """Run the sidecar: OTLP/HTTP ingest on /v1/traces, API on /api, web page on /.

    Every setting can also come from the environment (OTEL_GRPO_SIDECAR_HOST, _PORT, _DB,
    _TOKEN, _READ_TOKEN, _ALLOW_UNAUTHENTICATED, _MAX_BODY_BYTES, _INGEST_WORKERS (ingest processes,
    default 2; 0: in the server process), _ALLOWED_HOSTS, _RETENTION_MAX_RUNS, _BODY_TIMEOUT_S,
    _KEEP_ALIVE_S, _MAX_CONNECTIONS, _LOG_FILE, ...); flags win, and one set empty is refused (an
    empty token must not pass for none).

    With a PostgreSQL URL, any number of sidecars can serve one database: ingest and read
    through any of them.

    Only requests whose Host is an IP address, localhost or a single-label name are served
    (DNS-rebinding guard); list other names in OTEL_GRPO_SIDECAR_ALLOWED_HOSTS. Listening
    beyond loopback needs both tokens, or --allow-unauthenticated to say an open sidecar is
    intended (it then warns). A database that cannot be opened is one error line and
    exit code 1; an existing one on a full disk is served read-only.
    """
    require("sidecar")
    import uvicorn
    from uvicorn.config import LOG_LEVELS

    if log_level.lower() not in LOG_LEVELS:  # before the database is created (uvicorn's KeyError came after)
        raise typer.BadParameter(f"{log_level!r} is not one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")

    from otel_grpo.sidecar import SidecarSettings, create_app
    from otel_grpo.sidecar._heap import keep_freed_heap
    from otel_grpo.sidecar._settings import loopback_only

    given = {"host": host, "port": port, "db": db, "ingest_token": token, "read_token": read_token,
             "log_file": log_file, "allow_unauthenticated": allow_unauthenticated or None}
    try:
        settings = SidecarSettings(**{k: v for k, v in given.items() if v is not None})
    except ValueError as e:  # SettingsError: one line naming the flag's field or the variable
        fail(f"invalid sidecar settings: {e}")
    # Before anything starts a thread (opening a PostgreSQL store starts its pool's): the arena cap
    # holds only for arenas made after it, and the check's threads had made four more for good.
    keep_freed_heap()  # this process serves the sidecar only; see _heap for the measured why
    if settings.log_file is not None:  # before the database is created: a bad --log-file leaves none behind
        _check_log_file(settings.log_file)
    settings = _check_db(settings)
    _check_port(settings.host, settings.port)
    if not loopback_only(settings.host) and not (settings.ingest_token and settings.read_token):
        warn(f"the sidecar listens on {settings.host} without both tokens, as allowed: anyone who reaches it can "
             "read samples or write runs (browsers are held off by the Host check, see OTEL_GRPO_SIDECAR_ALLOWED_HOSTS)")
    # Idle keep-alive connections close after keep_alive_s (those that never sent a request too,
    # see _idle); past max_connections uvicorn answers 503 at once (see _fds for accept errors).
    extra = {} if settings.log_file is None else {"log_config": log_config(settings, log_level)}
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=log_level, access_log=False,
        timeout_graceful_shutdown=5, timeout_keep_alive=settings.keep_alive_s,
        limit_concurrency=settings.max_connections, **extra))
    app.state.connections = lambda: server.server_state.connections  # for closing request-less ones
    server.run()


def log_config(settings, level: str) -> dict:
    """logging.config.dictConfig for `--log-file`: every logger of the process (uvicorn's, ours,
    asyncio's) into one size-rotated file, so no log can fill the disk next to the database; errors
    also to stderr, where a supervisor (`otel-grpo up`, a container runtime) shows why it stopped
    (they are rate-limited at the source: accept failures once per interval)."""
    handler = {"class": "logging.handlers.RotatingFileHandler", "filename": str(settings.log_file),
               "maxBytes": settings.log_max_bytes, "backupCount": settings.log_backups, "formatter": "plain"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"file": handler,
                     "stderr": {"class": "logging.StreamHandler", "level": "ERROR", "formatter": "plain"}},
        "loggers": {"uvicorn": {"level": level.upper()}, "otel_grpo": {"level": "INFO"}},
        "root": {"handlers": ["file", "stderr"], "level": "WARNING"},
    }


def _check_db(settings):
    """Open the store once before serving: an unwritable path, an unreachable server or a write
    lock that another process never gives back is one line, not uvicorn's traceback. Returns the
    settings with what is left of `startup_lock_timeout_s`, so that start-up waits for the lock at
    most that long in all (the server's own open waits only for the rest)."""
    import sqlite3
    import time

    import psycopg

    from otel_grpo.sidecar.store import SchemaError, StoreUnavailable, open_store

    target, name = settings.db, settings.db_name

    # an existing database file may be served read-only: only a new one must be creatable
    problem = path_problem(target, "--db") if isinstance(target, Path) and not target.is_file() else None
    if problem:
        fail(f"cannot create the sidecar database: {problem}")
    started = time.monotonic()
    try:
        open_store(target, startup_lock_timeout_s=settings.startup_lock_timeout_s).close()
    except OSError as e:
        fail(f"cannot open the sidecar database: {os_error_line(e, target, '--db')}")
    except (sqlite3.Error, psycopg.Error, SchemaError, StoreUnavailable) as e:
        message = " ".join(str(e).replace(str(target), name).split())  # psycopg's are multi-line
        fail(f"cannot open the sidecar database {name!r}: {message}")
    left = max(0.0, settings.startup_lock_timeout_s - (time.monotonic() - started))
    return settings.model_copy(update={"startup_lock_timeout_s": left})


def _check_log_file(path: Path) -> None:
    """Make the log file's directory (as the database's) and open the file once before serving: a path that
    cannot take it is one line, not logging's traceback from inside uvicorn's set-up."""
    problem = path_problem(path, "--log-file")
    if problem:
        fail(f"cannot write the log file: {problem}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as e:
        fail(f"cannot write the log file: {os_error_line(e, path, '--log-file')}")


def _check_port(host: str, port: int) -> None:
    """A port in use is one line before uvicorn starts (its error came among INFO lines, exit 3)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as e:
            fail(f"cannot listen on {host}:{port}: {e.strerror or e} (another sidecar? choose --port)")
