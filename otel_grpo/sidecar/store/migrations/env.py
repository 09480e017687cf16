"""Alembic's environment: migrates over the connection the runner passes (config.attributes)."""

from __future__ import annotations

from alembic import context


def _mark_legacy(ctx, step, heads, run_args) -> None:
    # The pre-Alembic counters follow the revision, in its transaction: an older sidecar reads them and
    # refuses a database newer than its own schema instead of reading it.
    if not step.is_upgrade:
        return
    (head,) = heads
    version = int(head[1:])
    conn = ctx.connection
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(f"PRAGMA user_version = {version}")
    else:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        conn.exec_driver_sql("DELETE FROM schema_version")
        conn.exec_driver_sql(f"INSERT INTO schema_version VALUES ({version})")


def run() -> None:
    conn = context.config.attributes["connection"]
    context.configure(connection=conn, transaction_per_migration=True, transactional_ddl=True,
                      on_version_apply=_mark_legacy)
    with context.begin_transaction():
        context.run_migrations()


run()
