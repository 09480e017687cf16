"""v10: a sample row's name (`uid`) says its writer's attempt, so two attempts' rows at one step are two rows."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import script

revision = "v10"
down_revision = "v9"
branch_labels = None
depends_on = None

# In both dialects. The uids stored so far are a sample index or a span's id and place (`<hex>:<i>`), never with
# an `@`: no renamed row can meet another's name on the unique (run_id, step, uid) index, however the rows are
# visited. Rows of a sender that named no attempt keep their names, as it still sends them.
_RENAME = "UPDATE samples SET uid = uid || '@' || CAST(attempt AS TEXT) WHERE attempt IS NOT NULL;"


def upgrade() -> None:
    # v10: samples were unique on (run_id, step, uid) with the uid the sample index alone, so a relaunch's
    # evaluation at the step its checkpoint holds (verl's `val_before_train`, transformers' `eval_on_start`),
    # numbered from 0 as the crashed attempt's training rows there were, lost every row that met one of theirs.
    # The ingest names a row by its writer's attempt too (`otlp._extract.SampleRecord.uid`); the stored rows get
    # the same names, so the same records sent again (a retried export, a replayed spill) still merge with them.
    # PostgreSQL:
    # v10: as SQLite's v10 (the same statement).
    script(_RENAME)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
