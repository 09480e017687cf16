"""${message}"""

from __future__ import annotations

from otel_grpo.sidecar.store.migrations._ddl import dialect, script

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    ${upgrades if upgrades else 'pass'}


def downgrade() -> None:
    raise NotImplementedError("the sidecar migrates forward only")
