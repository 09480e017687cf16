"""v9: the scalars of a step that several writer attempts wrote, per writer (`step_scalars`)."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v9"
down_revision = "v8"
branch_labels = None
depends_on = None

_SQLITE = """
CREATE TABLE step_scalars (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, metrics TEXT NOT NULL,
    PRIMARY KEY (run_id, step, attempt)
);  -- a rowid table: its rows are whole JSON objects, too large for a WITHOUT ROWID b-tree's
"""

_POSTGRESQL = """
CREATE TABLE step_scalars (
    run_id TEXT NOT NULL, step BIGINT NOT NULL, attempt BIGINT NOT NULL, metrics TEXT NOT NULL,
    PRIMARY KEY (run_id, step, attempt)
);
"""

# `steps.attempt` is now the step's sole writer, NULL where the step is split (`_step_scalars`): every stored
# step becomes its oldest writer's alone (what v8 knew of it), a sender's that named none where it has none (-1,
# `_step_scalars.NO_WRITER`, as every row written before v8).
_CONVERT = "UPDATE steps SET attempt = -1 WHERE attempt IS NULL;"


def upgrade() -> None:
    # v9: a step's scalars per writer attempt. v8 merged every writer's scalars of a step into one object tagged
    # with the oldest writer, so a relaunch's other rank (or evaluation) that sent a step before its rank 0
    # claimed it went with the crashed attempt's scalars, or the crashed attempt's stayed beside them. A step one
    # writer wrote stays one object, that writer's (`steps.attempt`); from a second writer on, each writer's
    # scalars are kept apart too, and a takeover removes the older attempts' alone (`_step_scalars`).
    # `steps.metrics`, the object every read serves, is unchanged.
    # PostgreSQL:
    # v9: as SQLite's v9 (step scalars per writer attempt).
    script((_SQLITE if dialect() == "sqlite" else _POSTGRESQL) + _CONVERT)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
