"""Schema versions and the migrations between them, applied on start, for both backends.

Each backend has its list of scripts; script i takes the database from version i to i + 1,
in one transaction, so a crash mid-migration leaves the previous version intact. SQLite keeps
the version in `PRAGMA user_version`; PostgreSQL in the one-row table `schema_version`, and
migrates under an advisory lock, so replicas starting together migrate once.

A new release that changes the schema appends a script to each list (never edits one).
"""

from __future__ import annotations

import sqlite3

_V1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    service_name TEXT, model TEXT, host TEXT,
    first_seen REAL NOT NULL, last_update REAL NOT NULL,
    first_step INTEGER, last_step INTEGER,
    sample_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE steps (
    run_id TEXT NOT NULL, step INTEGER NOT NULL,
    start_time REAL, end_time REAL, updated_at REAL NOT NULL,
    metrics TEXT NOT NULL DEFAULT '{}',   -- JSON object: stat key -> value, phase_duration/<name> -> s
    PRIMARY KEY (run_id, step)
) WITHOUT ROWID;
-- step span id -> step, so phase spans (which carry only their parent id) find their step,
-- whichever of the two arrives first.
CREATE TABLE step_spans (
    span_id BLOB PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE phases (
    span_id BLOB PRIMARY KEY, parent_span_id BLOB, name TEXT NOT NULL, duration REAL NOT NULL,
    run_id TEXT, step INTEGER, received_at REAL NOT NULL
);
CREATE INDEX phases_unresolved ON phases (parent_span_id) WHERE run_id IS NULL;
CREATE INDEX phases_step ON phases (run_id, step);
CREATE TABLE samples (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL, step INTEGER NOT NULL, uid TEXT NOT NULL,
    sample_index INTEGER, reward REAL, advantage REAL, completion_length REAL, time REAL,
    data TEXT NOT NULL,                    -- JSON object: every other column of the sample
    prompt TEXT, completion TEXT,          -- last: long text sits in overflow pages, read only when needed
    UNIQUE (run_id, step, uid)
);
CREATE INDEX samples_run_step_index ON samples (run_id, step, sample_index);
CREATE INDEX samples_run_reward ON samples (run_id, reward);
CREATE TABLE alerts (
    fingerprint TEXT NOT NULL, starts_at TEXT NOT NULL,
    status TEXT NOT NULL, alertname TEXT, run_id TEXT,
    labels TEXT NOT NULL, annotations TEXT NOT NULL,
    ends_at TEXT, generator_url TEXT, received_at REAL NOT NULL,
    PRIMARY KEY (fingerprint, starts_at)
);
CREATE INDEX alerts_run ON alerts (run_id, status);
"""

# v2: one row per (step, scalar) as well, so selecting a few metrics over many steps reads an
# index instead of parsing every step's JSON object. Backfilled from the v1 objects.
_V2 = """
CREATE TABLE step_values (
    run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL, value REAL,
    PRIMARY KEY (run_id, key, step)
) WITHOUT ROWID;
INSERT INTO step_values (run_id, key, step, value)
    SELECT s.run_id, j.key, s.step, j.value FROM steps AS s, json_each(s.metrics) AS j;
"""

# v3: the (run_id, step, sample_index) index goes. The unique (run_id, step, uid) index
# answers the same step filters, and a step's few hundred rows sort by sample_index in
# microseconds; one index fewer is less write work per ingested sample (benchmarks/README.md).
_V3 = """
DROP INDEX IF EXISTS samples_run_step_index;
"""

# v4: runs and steps carry write versions, so a reader holding a run's steps in memory reads only
# those written since (_step_series): every write of a step stamps it with the run's bumped
# `step_version`; retention that deletes steps bumps `step_epoch`. Those held steps replace the
# (run, key, step) rows of v2, which only the step reads used. Steps by end time: an alert's step
# (the last to end before it started).
_V4 = """
ALTER TABLE runs ADD COLUMN step_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN step_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
CREATE INDEX steps_run_version ON steps (run_id, version);
CREATE INDEX steps_run_end ON steps (run_id, end_time);
DROP TABLE step_values;
"""

# v5: attempts (`grpo.attempt`, catalog `spans`). A step sent again by a relaunched or resumed job replaces
# what the earlier attempt stored for it, samples, scalars and phases together: each sample and phase row
# says which attempt sent it, and `step_attempts` holds each step's newest. Rows stored before keep a NULL
# attempt (older than any), so every row is kept until a newer attempt at its step arrives.
_V5 = """
ALTER TABLE samples ADD COLUMN attempt INTEGER;
ALTER TABLE phases ADD COLUMN attempt INTEGER;
CREATE TABLE step_attempts (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL,
    PRIMARY KEY (run_id, step)
) WITHOUT ROWID;
"""

# v6: runs listed page by page (`_runs`): the default order, most recently updated first, walks this
# index from its end, so a page costs its rows and not a sort of every run (benchmarks/README.md,
# runs_scale).
_V6 = """
CREATE INDEX runs_last_update ON runs (last_update, run_id);
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6)
SCHEMA_VERSION = len(MIGRATIONS)

# PostgreSQL starts at SQLite's version 3 as one script (no PostgreSQL database predates it).
# Types: int64 steps and counts, float8 for REAL, bytea span ids; JSON stays text, as in SQLite,
# so rows come back byte for byte as stored (jsonb would reorder keys).
_PG_V1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    service_name TEXT, model TEXT, host TEXT,
    first_seen DOUBLE PRECISION NOT NULL, last_update DOUBLE PRECISION NOT NULL,
    first_step BIGINT, last_step BIGINT,
    sample_count BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE steps (
    run_id TEXT NOT NULL, step BIGINT NOT NULL,
    start_time DOUBLE PRECISION, end_time DOUBLE PRECISION, updated_at DOUBLE PRECISION NOT NULL,
    metrics TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, step)
);
CREATE TABLE step_values (
    run_id TEXT NOT NULL, key TEXT NOT NULL, step BIGINT NOT NULL, value DOUBLE PRECISION,
    PRIMARY KEY (run_id, key, step)
);
CREATE TABLE step_spans (
    span_id BYTEA PRIMARY KEY, run_id TEXT NOT NULL, step BIGINT NOT NULL
);
CREATE TABLE phases (
    span_id BYTEA PRIMARY KEY, parent_span_id BYTEA, name TEXT NOT NULL, duration DOUBLE PRECISION NOT NULL,
    run_id TEXT, step BIGINT, received_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX phases_unresolved ON phases (parent_span_id) WHERE run_id IS NULL;
CREATE INDEX phases_step ON phases (run_id, step);
CREATE TABLE samples (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    run_id TEXT NOT NULL, step BIGINT NOT NULL, uid TEXT NOT NULL,
    sample_index BIGINT, reward DOUBLE PRECISION, advantage DOUBLE PRECISION,
    completion_length DOUBLE PRECISION, time DOUBLE PRECISION,
    data TEXT NOT NULL,
    prompt TEXT, completion TEXT,
    UNIQUE (run_id, step, uid)
);
-- lz4 rather than pglz for the long text PostgreSQL compresses (TOAST): several times less CPU
-- per ingested sample (both ship with Debian's and the official images' PostgreSQL 14+).
ALTER TABLE samples ALTER COLUMN prompt SET COMPRESSION lz4;
ALTER TABLE samples ALTER COLUMN completion SET COMPRESSION lz4;
ALTER TABLE samples ALTER COLUMN data SET COMPRESSION lz4;
CREATE INDEX samples_run_reward ON samples (run_id, reward);
-- PostgreSQL sorts NULLs last ascending but first descending; the store asks NULLS LAST both
-- ways, which one index serves in one direction only. Top rewards (descending) get their own.
CREATE INDEX samples_run_reward_desc ON samples (run_id, reward DESC NULLS LAST);
CREATE TABLE alerts (
    fingerprint TEXT NOT NULL, starts_at TEXT NOT NULL,
    status TEXT NOT NULL, alertname TEXT, run_id TEXT,
    labels TEXT NOT NULL, annotations TEXT NOT NULL,
    ends_at TEXT, generator_url TEXT, received_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (fingerprint, starts_at)
);
CREATE INDEX alerts_run ON alerts (run_id, status);
"""

# v2: sample rows up to a whole page (8160 bytes) stay in the heap page, uncompressed. With the
# default target (~2 KiB) a 1-4 KiB completion was lz4-compressed and, still too long, moved to
# the TOAST table: a second heap tuple and a TOAST index entry per sample, about half of the
# server's work per inserted row, for a few percent less disk (model text barely compresses;
# figures in benchmarks/README.md, sidecar). Longer rows are still compressed and moved out.
_PG_V2 = """
ALTER TABLE samples SET (toast_tuple_target = 8160);
"""

# v3: a chart's reads come from indexes alone. The step values' primary key carries the value
# (SQLite's WITHOUT ROWID table already is its key): from the heap, a metric's values sit on as many
# pages as the run has steps (each step's values side by side). The steps' end times beside their
# key: the heap holds each step's whole JSON object, read for the time alone. Figures:
# benchmarks/README.md, sidecar.
_PG_V3 = """
ALTER TABLE step_values DROP CONSTRAINT step_values_pkey, ADD PRIMARY KEY (run_id, key, step) INCLUDE (value);
CREATE INDEX steps_run_step_end ON steps (run_id, step) INCLUDE (end_time);
"""

# v4: as SQLite's v4 (write versions for the readers' in-memory step histories, steps by end
# time); the step reads no longer touch step_values or the (run_id, step) INCLUDE (end_time)
# index of v3.
_PG_V4 = """
ALTER TABLE runs ADD COLUMN step_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN step_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
CREATE INDEX steps_run_version ON steps (run_id, version);
CREATE INDEX steps_run_end ON steps (run_id, end_time);
DROP INDEX steps_run_step_end;
DROP TABLE step_values;
"""

# v5: as SQLite's v5 (attempts).
_PG_V5 = """
ALTER TABLE samples ADD COLUMN attempt BIGINT;
ALTER TABLE phases ADD COLUMN attempt BIGINT;
CREATE TABLE step_attempts (
    run_id TEXT NOT NULL, step BIGINT NOT NULL, attempt BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);
"""

# v6: as SQLite's v6 (runs by last update).
_PG_V6 = """
CREATE INDEX runs_last_update ON runs (last_update, run_id);
"""

PG_MIGRATIONS: tuple[str, ...] = (_PG_V1, _PG_V2, _PG_V3, _PG_V4, _PG_V5, _PG_V6)
PG_SCHEMA_VERSION = len(PG_MIGRATIONS)
PG_LOCK = 0x6F74_6770  # "otgp": the advisory lock key of migrations and of every write transaction


class SchemaError(RuntimeError):
    """The database was written by a newer sidecar than this one."""


def _check(found: int, latest: int) -> None:
    if found > latest:
        raise SchemaError(f"database schema version {found} is newer than this sidecar's ({latest}); upgrade otel-grpo")


def migrate_sqlite(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version it found."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    _check(found, SCHEMA_VERSION)
    for version in range(found, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return found


def _split(script: str) -> list[str]:
    # executescript() commits first, which would break the one-transaction-per-migration rule.
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def migrate_postgres(conn) -> int:
    """Bring a PostgreSQL database (an autocommit psycopg connection) to PG_SCHEMA_VERSION;
    returns the version it found."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))  # one migrator among replicas
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        if row is None:
            conn.execute("INSERT INTO schema_version VALUES (0)")
        found = 0 if row is None else row[0]
    _check(found, PG_SCHEMA_VERSION)
    for version in range(found, PG_SCHEMA_VERSION):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
            if conn.execute("SELECT version FROM schema_version").fetchone()[0] != version:
                continue  # another replica applied it meanwhile
            for statement in _split(PG_MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = %s", (version + 1,))
    return found
