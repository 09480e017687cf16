"""A real PostgreSQL server for tests: Debian's binaries, a temporary cluster, a free loopback port.

    server = PostgresServer.start()          # initdb + pg_ctl start, as the `postgres` user when root
    url = server.new_database()              # postgresql://otel:secret@127.0.0.1:<port>/t_1
    server.freeze(); server.thaw()           # SIGSTOP / SIGCONT every server process (a hung database)
    server.crash(every_process=True); server.resume()   # SIGKILL, then crash recovery
    server.stop()

The server refuses to run as root, so as root the data directory is handed to the `postgres`
user and both tools run as that user. Connections use a password (scram-sha-256), so the URL a
test hands the sidecar has the same shape as a deployment's.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

def _bin() -> Path:
    if "OTEL_GRPO_PG_BIN" in os.environ:
        return Path(os.environ["OTEL_GRPO_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")  # Debian's layout


BIN = _bin()
USER, PASSWORD = "otel", "secret"


def available() -> str | None:
    """None when a server can be started here, else why not (the skip reason)."""
    for tool in ("initdb", "pg_ctl"):
        if not (BIN / tool).is_file():
            return f"PostgreSQL binaries not found in {BIN} (apt-get install postgresql, or make setup)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run the server as"
    return None


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, killed but not yet reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self._names = itertools.count(1)
        self._options = ""

    @classmethod
    def start(cls, durable: bool = False, settings: str = "") -> "PostgresServer":
        """`durable`: fsync as a production server does (benchmarks); off by default (tests).
        `settings`: more server options (`-c name=value ...`)."""
        root = Path(tempfile.mkdtemp(prefix="otel-grpo-pg-"))
        server = cls(root, _free_port())
        (root / "pw").write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(root, entry.pw_uid, entry.pw_gid)
            os.chown(root / "pw", entry.pw_uid, entry.pw_gid)
        server._run("initdb", "-D", str(server.data), "-U", USER, f"--pwfile={root / 'pw'}",
                    "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8")
        # fsync off: the tests kill sidecars, never the machine, so the OS page cache is enough.
        options = (f"-c listen_addresses=127.0.0.1 -c port={server.port} -c unix_socket_directories={root} "
                   "-c max_connections=200" + ("" if durable else " -c fsync=off -c full_page_writes=off")
                   + (" " + settings if settings else ""))
        server._options = options
        server.resume()
        return server

    def halt(self) -> None:
        """Stop the server, keeping its data (an outage); `resume()` starts it again on its port."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", self._options, "-w",
                  "-t", "60", "start")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def processes(self) -> list[int]:
        """The postmaster, then its children (backends, checkpointer, WAL writer, ...)."""
        master = self.postmaster_pid()
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # exited meanwhile
                continue
            if int(fields[1]) == master:  # the field after the state: the parent's pid
                children.append(int(stat.parent.name))
        return [master, *children]

    def crash(self, every_process: bool) -> None:
        """SIGKILL the postmaster (its backends then exit by themselves) or every server process at once (the OOM
        killer, a node failure), and wait until they are gone; `resume()` then starts the server, which recovers
        from its WAL. Here the killed postmaster may stay an unreaped zombie that its lock files still name, so
        they are removed, as a restarted host or container would not have that process."""
        processes = self.processes()
        self._signal(processes if every_process else processes[:1], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while any(map(_running, processes)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"server processes still running 60 s after the kill: {processes}")
            time.sleep(0.05)
        for lock in (self.data / "postmaster.pid", self.root / f".s.PGSQL.{self.port}.lock"):
            lock.unlink(missing_ok=True)

    def freeze(self) -> None:
        """SIGSTOP the whole server: it accepts TCP connections (the kernel does) but answers nothing.
        The postmaster first, so it starts no process that the stop would miss."""
        os.kill(self.postmaster_pid(), signal.SIGSTOP)
        self._signal(self.processes()[1:], signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(self.processes(), signal.SIGCONT)

    @staticmethod
    def _signal(pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # a backend that exited after it was listed (its client left)
                pass

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(BIN / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, cwd=self.root)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
