"""v4: write versions of runs and steps (the readers' held step histories), steps by end time."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v4"
down_revision = "v3"
branch_labels = None
depends_on = None

_SQLITE = """
ALTER TABLE runs ADD COLUMN step_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN step_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
CREATE INDEX steps_run_version ON steps (run_id, version);
CREATE INDEX steps_run_end ON steps (run_id, end_time);
DROP TABLE step_values;
"""

_POSTGRESQL = """
ALTER TABLE runs ADD COLUMN step_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN step_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
CREATE INDEX steps_run_version ON steps (run_id, version);
CREATE INDEX steps_run_end ON steps (run_id, end_time);
DROP INDEX steps_run_step_end;
DROP TABLE step_values;
"""


def upgrade() -> None:
    # v4: runs and steps carry write versions, so a reader holding a run's steps in memory reads only
    # those written since (_step_series): every write of a step stamps it with the run's bumped
    # `step_version`; retention that deletes steps bumps `step_epoch`. Those held steps replace the
    # (run, key, step) rows of v2, which only the step reads used. Steps by end time: an alert's step
    # (the last to end before it started).
    # PostgreSQL:
    # v4: as SQLite's v4 (write versions for the readers' in-memory step histories, steps by end
    # time); the step reads no longer touch step_values or the (run_id, step) INCLUDE (end_time)
    # index of v3.
    script(_SQLITE if dialect() == "sqlite" else _POSTGRESQL)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
