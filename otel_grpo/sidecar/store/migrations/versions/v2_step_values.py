"""v2: SQLite: one row per (step, scalar); PostgreSQL: sample rows of up to a page stay inline."""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = "v2"
down_revision = "v1"
branch_labels = None
depends_on = None

_SQLITE = """
CREATE TABLE step_values (
    run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL, value REAL,
    PRIMARY KEY (run_id, key, step)
) WITHOUT ROWID;
INSERT INTO step_values (run_id, key, step, value)
    SELECT s.run_id, j.key, s.step, j.value FROM steps AS s, json_each(s.metrics) AS j;
"""

_POSTGRESQL = """
ALTER TABLE samples SET (toast_tuple_target = 8160);
"""


def upgrade() -> None:
    # v2: one row per (step, scalar) as well, so selecting a few metrics over many steps reads an
    # index instead of parsing every step's JSON object. Backfilled from the v1 objects.
    # PostgreSQL:
    # v2: sample rows up to a whole page (8160 bytes) stay in the heap page, uncompressed. With the
    # default target (~2 KiB) a 1-4 KiB completion was lz4-compressed and, still too long, moved to
    # the TOAST table: a second heap tuple and a TOAST index entry per sample, about half of the
    # server's work per inserted row, for a few percent less disk (model text barely compresses;
    # figures in benchmarks/README.md, sidecar). Longer rows are still compressed and moved out.
    script(_SQLITE if dialect() == "sqlite" else _POSTGRESQL)


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
