"""The sidecar's one settings class: flags, environment (`OTEL_GRPO_SIDECAR_*`) and defaults.

    >>> SidecarSettings(db="/tmp/s.db", ingest_token="secret").ingest_token
    'secret'
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .._setting_errors import SettingsError
from .._setting_lists import comma_list

MiB = 1024 * 1024


class SidecarSettings(BaseSettings):
    """Everything the sidecar can be told; each field is also `OTEL_GRPO_SIDECAR_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="OTEL_GRPO_SIDECAR_", extra="ignore", populate_by_name=True)

    def __init__(self, **values: Any) -> None:
        """Raises `SettingsError` (a ValueError), one line naming the argument or variable that is wrong:
        `OTEL_GRPO_SIDECAR_PORT=tcp://10.0.0.7:8000: ...` says where a value came from, as `port: ...` cannot."""
        _refuse_empty_variables(type(self), values)
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise SettingsError.of(error, type(self), values) from None

    host: str = "127.0.0.1"
    """Bind address; loopback by default so nothing is exposed by accident."""
    port: int = Field(8000, ge=0, le=65535)
    db: Path | str = Path("otel-grpo-sidecar.db")
    """Where samples are stored: a path is an SQLite file (WAL mode; created with its parent folder
    if missing); `postgresql://user:pass@host:port/db` is a PostgreSQL database, which several
    sidecars (replicas) can share. Either is migrated to the current schema on start."""
    log_file: Path | None = None
    """Write the log here, rotated (`log_max_bytes`, `log_backups`), instead of to stderr."""
    log_max_bytes: int = Field(10 * MiB, ge=64 * 1024)
    """Size at which the log file is rotated."""
    log_backups: int = Field(3, ge=1)
    """Rotated log files kept (`<log_file>.1` ... `.N`)."""
    read_connections: int = Field(8, ge=1, le=64)
    """Database connections for reads; a read beyond these waits for one (bounds memory)."""
    step_cache_mb: int = Field(256, ge=0)
    """Memory for the step histories of the runs read most recently, kept current as steps
    arrive, so a chart of a long run reads only the steps written since its last read (about
    6 MiB per 10,000 steps of 60 scalars, 19 MiB of 233, up to half as much again while a run
    grows). A run that does not fit is read whole at every read."""
    run_active_s: float = Field(600.0, gt=0)
    """A run that sent data within this many seconds is `active` in `/api/runs` (else `idle`, or
    `firing` while one of its alerts fires)."""
    ingest_token: str | None = Field(None, validation_alias=AliasChoices("ingest_token", "OTEL_GRPO_SIDECAR_TOKEN", "OTEL_GRPO_SIDECAR_INGEST_TOKEN"))
    """Bearer token required on `POST /v1/traces` and `POST /api/alerts`; none: open."""
    read_token: str | None = None
    """Bearer token required on the read API (`/api/...` GETs); none: open."""
    allow_unauthenticated: bool = False
    """Listen beyond loopback without both tokens anyway. Off: such a `host` is refused, since
    anyone who reaches it could then write runs or read samples."""
    max_body_bytes: int = Field(64 * MiB, ge=1024)
    """Largest request body after decompression; larger gets 413, inflation stops there."""
    max_alert_body_bytes: int = Field(4 * MiB, ge=1024)
    """Largest Alertmanager webhook body (`POST /api/alerts`); larger gets 413 before it is read."""
    max_concurrent_ingest: int = Field(4, ge=1)
    """Ingest requests decoded and stored at once (after their body has arrived); more are
    answered 503 with Retry-After."""
    max_concurrent_bodies: int = Field(16, ge=1)
    """Ingest bodies being received at once (before they wait for an ingest slot); more are
    answered 503 at once. With `max_body_bytes` this bounds the memory bodies take."""
    body_timeout_s: float = Field(30.0, gt=0)
    """An ingest request body must arrive whole within this; a slower one gets 408."""
    keep_alive_s: float = Field(15.0, gt=0)
    """An idle connection is closed after this long (kept alive after a response, or opened and
    never sent a whole request)."""
    max_connections: int = Field(512, ge=8)
    """Connections served at once; beyond this uvicorn answers 503 at once, so running out of
    file descriptors becomes refusals rather than a stalled server (keep it under `ulimit -n`)."""
    retry_after_s: int = Field(1, ge=1)
    ingest_workers: int = Field(2, ge=0, le=64)
    """Worker processes that decode, extract and commit ingest requests, so ingest is not held to
    the one core of the server's GIL. 2 suits a 2-core host (use about the number of cores);
    0 does it all in the server process (no extra processes; fine for tests and small runs).
    Workers start from a multiprocessing forkserver, so a script that builds the app itself needs
    the usual `if __name__ == "__main__":` guard (`otel-grpo sidecar` and uvicorn have it)."""
    ingest_worker_timeout_s: float = Field(120.0, gt=0)
    """A worker that has not answered a request after this long is killed and replaced; the request
    gets 503 with Retry-After. Must exceed the time a `max_body_bytes` body takes to store."""
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    """SQLite `synchronous` (the database is always in WAL mode).

    NORMAL (default): a commit appends to the WAL without an fsync, so a 200 survives the
    sidecar process crashing or being killed (SIGKILL included: the frames are in the OS page
    cache, and the next open recovers them from the WAL); only an OS crash or power loss can
    drop the last transactions before the next checkpoint's fsync. FULL fsyncs the WAL on every
    commit, surviving power loss too, at about a quarter less ingest throughput (benchmarks).
    On PostgreSQL both mean `synchronous_commit = on`: the server's WAL is flushed before the 200,
    so an acknowledged sample survives the sidecar, a killed server process and a crash of the
    database machine alike (with `off`, killing one server process with -9 lost samples already
    answered 200). The cost, on the ingest benchmark: benchmarks/README.md, sidecar."""
    db_timeout_s: float = Field(5.0, gt=0, le=3600)
    """The longest a request waits on the database: a statement (PostgreSQL's `statement_timeout`
    and `lock_timeout`; the client gives up one second later on a server that answers nothing, e.g.
    one that is stopped or hung; on SQLite a read statement, interrupted, and its wait for another
    process's lock), the store's write lock (SQLite: with the other writing processes' flock of
    `<db>-ingest.lock`), or a free read connection. Beyond it the
    request gets 503 + Retry-After, so a database in trouble never holds requests or threads for
    long. Raise it if single statements legitimately take longer (reads of very large runs,
    `max_body_bytes` bodies); retention runs with a longer bound of its own (10 minutes)."""
    startup_lock_timeout_s: float = Field(60.0, gt=0, le=3600)
    """SQLite: the longest start-up waits for `<db>-ingest.lock`, under which it checks and migrates
    the schema, while another process holds it (another sidecar migrating or writing, or a writer
    stuck or stopped; the log names its pid at once). Beyond it an existing database is served
    read-only (ingest 503, /readyz names the lock and its holder), as one whose migration cannot run,
    until the lock is free (tried every few seconds: then it migrates and takes writes); a new one is
    an error. Longer than `db_timeout_s`: another sidecar's
    migration of a large store is worth waiting for. (PostgreSQL replicas wait for one another's
    migration up to 10 minutes, the maintenance bound.)"""
    retention_max_runs: int | None = Field(None, ge=1)
    """Keep this many most recently updated runs; none: all."""
    retention_max_steps: int | None = Field(None, ge=1)
    """Keep this many latest steps per run (with their samples); none: all."""
    retention_max_age_s: float | None = Field(None, gt=0)
    """Drop steps, samples and alerts older than this many seconds; none: keep."""
    retention_interval_s: float = Field(60.0, gt=0)
    """How often retention runs. (The query planner's statistics are refreshed within seconds of the store's
    samples doubling, whatever this is.)"""
    heap_release_s: float = Field(60.0, ge=0)
    """How often the server hands the kernel back the memory its allocator holds free (what a burst of
    large reads freed, otherwise kept for good); 0: never."""
    allowed_hosts: Annotated[list[str], NoDecode] = []
    """Host names served besides those that cannot be DNS-rebound (IP literals, localhost,
    single-label names such as a compose service); `*` serves any Host. A page on another
    name gets 421. Set it when the sidecar is reached by a dotted name (`sidecar.example.org`).
    A leading `*.` matches exactly one DNS label, as a Kubernetes Ingress host does: `*.example.org`
    serves `a.example.org`, not `example.org` nor `a.b.example.org`.
    In the environment a comma list (`a.example.org,b.example.org`) or a JSON array."""
    cors_origins: Annotated[list[str], NoDecode] = []
    """Origins allowed by CORS; empty (the default) adds no CORS headers at all. In the environment
    a comma list or a JSON array, as `allowed_hosts`."""

    @field_validator("allowed_hosts", "cors_origins", mode="before")
    @classmethod
    def _lists_from_env(cls, value: object) -> object:
        return comma_list(value)

    @field_validator("db", mode="after")
    @classmethod
    def _db_target(cls, value: Path | str) -> Path | str:
        if isinstance(value, str) and not value.startswith(("postgresql://", "postgres://")):
            if "://" in value:
                raise ValueError("db must be a file path or a postgresql://user:pass@host:port/db URL")
            return Path(value)
        return value

    @property
    def db_name(self) -> str:
        """The database as logs may show it (a URL without its password)."""
        from .store import redact

        return redact(self.db) if isinstance(self.db, str) else str(self.db)

    @field_validator("ingest_token", "read_token")
    @classmethod
    def _token_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("a token must not be blank (leave it unset to disable)")
        return value

    @model_validator(mode="after")
    def _closed_beyond_loopback(self) -> "SidecarSettings":
        if not loopback_only(self.host) and not (self.ingest_token and self.read_token) and not self.allow_unauthenticated:
            raise ValueError(f"host {self.host} is reachable beyond this machine: set both tokens (ingest_token and "
                             "read_token: --token and --read-token), or allow_unauthenticated (--allow-unauthenticated) "
                             "if an open sidecar is intended")
        return self


def _refuse_empty_variables(settings_cls: type[SidecarSettings], given: dict[str, Any]) -> None:
    """An `OTEL_GRPO_SIDECAR_*` variable set empty (or blank) is refused, naming it: read as a value it
    meant a path of ".", a host reachable from anywhere or an empty list, depending on the field, and an
    empty token must not pass for no token. An argument wins over the variable, as pydantic-settings does."""
    env = {k.upper(): v for k, v in os.environ.items()}
    prefix = settings_cls.model_config["env_prefix"]
    for field, info in settings_cls.model_fields.items():
        if field in given:
            continue
        alias = info.validation_alias
        names = [str(a).upper() for a in alias.choices] if isinstance(alias, AliasChoices) else []
        for name in [f"{prefix}{field}".upper(), *names]:
            if name.startswith(prefix) and name in env and not env[name].strip():
                raise SettingsError(f"{name}={env[name]}: empty; leave it unset for the default")


def loopback_only(host: str) -> bool:
    """127.0.0.0/8, ::1 or `localhost`: reachable from this machine only."""
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
