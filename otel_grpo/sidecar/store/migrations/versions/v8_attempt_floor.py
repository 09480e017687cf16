"""v8: each run's newest attempt and the step it resumed at; each step row's oldest writer attempt."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v8"
down_revision = "v7"
branch_labels = None
depends_on = None

_SQLITE = """
ALTER TABLE runs ADD COLUMN attempt INTEGER;
ALTER TABLE runs ADD COLUMN attempt_step INTEGER;
ALTER TABLE runs ADD COLUMN attempt_since INTEGER;
ALTER TABLE steps ADD COLUMN attempt INTEGER;
"""

_POSTGRESQL = """
ALTER TABLE runs ADD COLUMN attempt BIGINT;
ALTER TABLE runs ADD COLUMN attempt_step BIGINT;
ALTER TABLE runs ADD COLUMN attempt_since BIGINT;
ALTER TABLE steps ADD COLUMN attempt BIGINT;
"""

# From `step_attempts`, in both dialects: the newest attempt, the first step it holds (a relaunch's retired
# steps were claimed for it, so this is where it resumed), and the writers that count as its: from halfway
# after the newest attempt below it (`catalog.spans.writers_from`; none where it is the run's only one).
_BACKFILL = """
UPDATE runs SET attempt = (SELECT max(a.attempt) FROM step_attempts AS a WHERE a.run_id = runs.run_id);
UPDATE runs SET
    attempt_step = (SELECT min(a.step) FROM step_attempts AS a WHERE a.run_id = runs.run_id
                                                                   AND a.attempt = runs.attempt),
    attempt_since = (SELECT max(a.attempt) FROM step_attempts AS a WHERE a.run_id = runs.run_id
                                                                      AND a.attempt < runs.attempt)
WHERE attempt IS NOT NULL;
UPDATE runs SET attempt_since = attempt_since + (attempt - attempt_since + 1) / 2 WHERE attempt_since IS NOT NULL;
"""


def upgrade() -> None:
    # v8: the run's attempt floor. `step_attempts` says who holds the steps it has a row for, so a crashed
    # attempt's step that first arrived after the relaunch's retirement (a retried export, a replayed spill),
    # or one below what `max_steps` retention kept, was stored beside the relaunch's. The floor says it for
    # every step from the one the newest attempt resumed at: an older attempt's record there is stale.
    # `steps.attempt`: the oldest writer attempt of the scalars the row holds (NULL: one that named none, as
    # every row written before), so that a claim removes only what an older attempt's writers merged into
    # the step, not another rank's scalars of its own. Written by both stores on every step merge.
    # PostgreSQL:
    # v8: as SQLite's v8 (attempt floor); new columns without a default: no table rewrite.
    script((_SQLITE if dialect() == "sqlite" else _POSTGRESQL) + _BACKFILL)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
