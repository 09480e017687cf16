"""v6: runs by last update (the same index on both dialects)."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import script

revision = "v6"
down_revision = "v5"
branch_labels = None
depends_on = None


def upgrade() -> None:
    script("CREATE INDEX runs_last_update ON runs (last_update, run_id);")


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
