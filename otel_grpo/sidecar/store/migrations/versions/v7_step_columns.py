"""v7: each run's step columns, kept as they are written (the run explorer's column search)."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v7"
down_revision = "v6"
branch_labels = None
depends_on = None

_SQLITE = """
CREATE TABLE step_columns (
    run_id TEXT NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
INSERT INTO step_columns (run_id, key)
    SELECT DISTINCT s.run_id, j.key FROM steps AS s, json_each(s.metrics) AS j;
"""

_POSTGRESQL = """
CREATE TABLE step_columns (
    run_id TEXT NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
INSERT INTO step_columns (run_id, key)
    SELECT DISTINCT run_id, json_object_keys(metrics::json) FROM steps;
"""


def upgrade() -> None:
    # v7: every stat key any step of a run has carried, one row each, added as steps are written. Listing
    # a run's columns read its latest 200 steps' JSON objects before, so a column logged only early in a
    # long run (an evaluation at step 50 of 100,000) could not be found; now it costs the run's columns,
    # whatever its length. Backfilled from the stored steps.
    # PostgreSQL:
    # v7: as SQLite's v7 (each run's step columns); json, not jsonb, for the backfill: only the keys are read.
    script(_SQLITE if dialect() == "sqlite" else _POSTGRESQL)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
