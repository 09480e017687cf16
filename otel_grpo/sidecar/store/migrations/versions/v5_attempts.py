"""v5: attempts: each sample and phase row says which attempt sent it; step_attempts holds the newest."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v5"
down_revision = "v4"
branch_labels = None
depends_on = None

_SQLITE = """
ALTER TABLE samples ADD COLUMN attempt INTEGER;
ALTER TABLE phases ADD COLUMN attempt INTEGER;
CREATE TABLE step_attempts (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL,
    PRIMARY KEY (run_id, step)
) WITHOUT ROWID;
"""

_POSTGRESQL = """
ALTER TABLE samples ADD COLUMN attempt BIGINT;
ALTER TABLE phases ADD COLUMN attempt BIGINT;
CREATE TABLE step_attempts (
    run_id TEXT NOT NULL, step BIGINT NOT NULL, attempt BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);
"""


def upgrade() -> None:
    # v5: attempts (`grpo.attempt`, catalog `spans`). A step sent again by a relaunched or resumed job replaces
    # what the earlier attempt stored for it, samples, scalars and phases together: each sample and phase row
    # says which attempt sent it, and `step_attempts` holds each step's newest. Rows stored before keep a NULL
    # attempt (older than any), so every row is kept until a newer attempt at its step arrives.
    # PostgreSQL:
    # v5: as SQLite's v5 (attempts).
    script(_SQLITE if dialect() == "sqlite" else _POSTGRESQL)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
