"""v3: SQLite drops the (run_id, step, sample_index) index; PostgreSQL's chart reads from indexes alone."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v3"
down_revision = "v2"
branch_labels = None
depends_on = None

_SQLITE = """
DROP INDEX IF EXISTS samples_run_step_index;
"""

_POSTGRESQL = """
ALTER TABLE step_values DROP CONSTRAINT step_values_pkey, ADD PRIMARY KEY (run_id, key, step) INCLUDE (value);
CREATE INDEX steps_run_step_end ON steps (run_id, step) INCLUDE (end_time);
"""


def upgrade() -> None:
    # v3: the (run_id, step, sample_index) index goes. The unique (run_id, step, uid) index
    # answers the same step filters, and a step's few hundred rows sort by sample_index in
    # microseconds; one index fewer is less write work per ingested sample (benchmarks/README.md).
    # PostgreSQL:
    # v3: a chart's reads come from indexes alone. The step values' primary key carries the value
    # (SQLite's WITHOUT ROWID table already is its key): from the heap, a metric's values sit on as many
    # pages as the run has steps (each step's values side by side). The steps' end times beside their
    # key: the heap holds each step's whole JSON object, read for the time alone. Figures:
    # benchmarks/README.md, sidecar.
    script(_SQLITE if dialect() == "sqlite" else _POSTGRESQL)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
