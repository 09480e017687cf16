"""Schema versions and the migrations between them, applied on start.

The version lives in `PRAGMA user_version`. Each migration is a script that takes
the database from version i to i + 1; they run in one transaction each, so a
crash mid-migration leaves the previous version intact.
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
# microseconds; one index fewer is ~15% less write work per ingested sample.
_V3 = """
DROP INDEX IF EXISTS samples_run_step_index;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
SCHEMA_VERSION = len(MIGRATIONS)


class SchemaError(RuntimeError):
    """The database was written by a newer sidecar than this one."""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version it found."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise SchemaError(f"database schema version {found} is newer than this sidecar's ({SCHEMA_VERSION}); upgrade otel-grpo")
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
