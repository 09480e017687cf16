"""Helpers of the revisions."""

from __future__ import annotations

from alembic import op


def dialect() -> str:
    """"sqlite" or "postgresql"."""
    return op.get_bind().dialect.name


def script(sql: str) -> None:
    """Run a script of `;`-separated statements (`--` comments allowed), one statement at a time (the
    sqlite3 driver runs one per call), inside the revision's transaction."""
    lines = [line.split("--", 1)[0] for line in sql.splitlines()]
    for statement in "\n".join(lines).split(";"):
        if statement.strip():
            op.execute(statement.strip())
