"""psycopg_pool's warnings held back while connection attempts time out, and not after.

A database that does not answer at all makes psycopg_pool warn at every attempt and every few seconds while reads
wait (33 lines a minute); the requests' failures say it once a streak instead (tests/sidecar/test_db_faults.py).
Those warnings were held back from one timed-out attempt until a connection got in: a pool that no longer needed
one hid every later warning of its, about anything, for as long as the sidecar ran."""

from __future__ import annotations

import logging
import socket
import threading
import time

import psycopg
import pytest

from otel_grpo.sidecar.store._login import Login


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers: a database host that hangs."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    held.append(server.accept()[0])
                except OSError:
                    pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        yield server.getsockname()[1]
        stop.set()
        thread.join()
        for conn in held:
            conn.close()


def _timed_out_attempt(port: int) -> psycopg.OperationalError:
    try:
        psycopg.connect(f"postgresql://otel@127.0.0.1:{port}/otel", connect_timeout=1)
    except psycopg.OperationalError as exc:
        return exc
    raise AssertionError("a server that never answers let a connection in")


def test_a_timed_out_attempt_holds_back_pool_warnings_for_hold_s_only(silent_server):
    login = Login("postgresql://otel@127.0.0.1/otel", hold_s=2.0)
    pool_log = logging.getLogger("psycopg.pool")
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Collect(level=logging.DEBUG)
    pool_log.addFilter(login)
    pool_log.addHandler(handler)
    try:
        login.refused(_timed_out_attempt(silent_server))
        assert login.problem is None  # a timeout is no refusal: the requests' failures say it
        pool_log.warning("error connecting in 'pool': connection timeout expired")
        pool_log.error("an error is never held back")
        time.sleep(2.3)  # no attempt since: the hold is over, with no connection got in
        pool_log.warning("rolling back returned connection: <psycopg.Connection [INTRANS]>")
        login.refused(_timed_out_attempt(silent_server))
        pool_log.warning("held again while attempts time out")
        login.accepted()
        pool_log.warning("a connection got in: nothing held")
    finally:
        pool_log.removeFilter(login)
        pool_log.removeHandler(handler)
    assert seen == ["an error is never held back", "rolling back returned connection: <psycopg.Connection [INTRANS]>",
                    "a connection got in: nothing held"]
