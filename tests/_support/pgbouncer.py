"""A real PgBouncer in front of a test's PostgreSQL server: Debian's binary, a small ini, a free loopback port.

    bouncer = PgBouncer.start(server, "t_1", pool_mode="transaction")
    url = bouncer.url                        # postgresql://otel:secret@127.0.0.1:<port>/t_1, through the pooler
    bouncer.admin("RECONNECT")               # a command of its admin console (PAUSE, RESUME, RECONNECT, SHOW ...)
    bouncer.restart()                        # stop and start again on the same port
    bouncer.stop()

PgBouncer, like the server, refuses to run as root: as root it runs as the `postgres` user. Clients log in
with the server's password (scram-sha-256), which the pooler also uses to log in to the server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .postgres import PASSWORD, USER, PostgresServer, _free_port

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> str | None:
    """None when a PgBouncer can be started here, else why not (the skip reason)."""
    if not Path(BINARY).is_file():
        return "no pgbouncer binary (apt-get install pgbouncer, or make system-deps)"
    return None


class PgBouncer:
    def __init__(self, root: Path, port: int, database: str) -> None:
        self.root = root
        self.port = port
        self.database = database
        self.proc: subprocess.Popen | None = None

    @classmethod
    def start(cls, server: PostgresServer, database: str, pool_mode: str = "transaction",
              pool_size: int = 4, settings: str = "") -> "PgBouncer":
        """A pooler for `database` of `server` in `pool_mode`, with at most `pool_size` server connections;
        `settings`: more lines of its `[pgbouncer]` section."""
        root = server.root / f"pgbouncer-{pool_mode}-{database}"
        root.mkdir()
        bouncer = cls(root, _free_port(), database)
        (root / "users.txt").write_text(f'"{USER}" "{PASSWORD}"\n')
        (root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{database} = host=127.0.0.1 port={server.port} dbname={database}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {bouncer.port}\nunix_socket_dir =\n"
            f"auth_type = scram-sha-256\nauth_file = {root / 'users.txt'}\nadmin_users = {USER}\n"
            f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
            f"logfile = {root / 'pgbouncer.log'}\n{settings}\n")
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (root, *root.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        bouncer.resume()
        return bouncer

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{self.database}"

    def resume(self) -> None:
        """Start the pooler (again) on its port; returns once it accepts connections."""
        user = {}
        if os.geteuid() == 0:  # its own process (not runuser's child), so that a signal reaches it
            entry = pwd.getpwnam("postgres")
            user = dict(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
        self.proc = subprocess.Popen([BINARY, str(self.root / "pgbouncer.ini")], cwd=self.root,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **user)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.admin("SHOW VERSION")
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log()[-2000:]}") from None
                time.sleep(0.05)

    def admin(self, command: str) -> list[tuple]:
        """Run `command` on the admin console (database `pgbouncer`); its rows."""
        import psycopg

        conninfo = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None, connect_timeout=2) as conn:
            cursor = conn.execute(command)
            return cursor.fetchall() if cursor.description else []

    def log(self) -> str:
        path = self.root / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def halt(self) -> None:
        """Stop the pooler (SIGINT: it closes every client and server connection at once)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.halt()
        self.resume()

    def stop(self) -> None:
        self.halt()
