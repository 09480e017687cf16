"""SIGTERM as a preemption: open runs end as preempted, then the process dies of SIGTERM as it would have.

    watch(telemetry)      # an exporting Telemetry, or any rank of a job, when it opens
    unwatch(telemetry)    # when it is shut down

A scheduler stops a job with SIGTERM (SLURM's preemption or time limit, a Kubernetes eviction),
which by default kills Python on the spot: no exit hook runs, the run's series stop mid-run, and
its alerts page a crash (GRPOMetricsAbsent) where they should say it was preempted and is to be
resumed (GRPORunPreempted). While a watched run is open, and only where nothing else handles
SIGTERM (its action is still the default when the first run opens, on the main thread), the
signal first shuts every open run down as preempted (as crashed where another rank of the job ended on its own
first: `Telemetry.shutdown`, `_rank_ends`), within their shutdown bound, and is then
raised again with the default action: the process still dies of SIGTERM, and its scheduler or
launcher sees what it saw before. A handler of the program's own (a launcher's, a trainer's
graceful stop) owns the signal: it is never replaced, and the default comes back when the last
run closes only if ours is still the one in place. A forked child (a data loader's worker)
inherits the handler but not the runs: there it only dies, as it would have. Python runs the
handler when the main thread next executes Python code: a process blocked in a collective whose
peers are already gone is killed before that, and its run then counts as crashed. As PID 1 of a
container without an init, where the kernel ignores SIGTERM's default action, the process goes on
as before until its SIGKILL, its run already ended as preempted.

Ending a run takes the locks of the hand-over to the sink, which the main thread holds while it hands a
step over (`deferred`): a SIGTERM that arrives there waits until the hand-over is done (a second one does
not wait), where running the shutdown at once would wait for locks that the interrupted thread cannot
release, and end the run only when the handler gave up. The same holds for a program's own handler that
calls `shutdown()` (`defer`): the shutdown runs as the hand-over ends, where it used to wait for the step
counter's lock for ever.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

logger = logging.getLogger("otel_grpo.telemetry")

_lock = threading.Lock()
_open: dict[int, Any] = {}  # id -> Telemetry: the runs to end as preempted
_installed_in: int | None = None  # the process that installed the handler (a fork inherits it, not the runs)


def watch(telemetry: Any) -> None:
    """End `telemetry`'s run as preempted on SIGTERM until `unwatch`, where SIGTERM is otherwise unhandled."""
    global _installed_in
    with _lock:
        _open[id(telemetry)] = telemetry
        if _installed_in == os.getpid() or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _installed_in = os.getpid()


def unwatch(telemetry: Any) -> None:
    """`telemetry` is shut down; the last open run puts SIGTERM's default action back (from the main thread)."""
    global _installed_in
    with _lock:
        _open.pop(id(telemetry), None)
        if _open or _installed_in != os.getpid() or threading.current_thread() is not threading.main_thread():
            return  # from another thread the handler stays: with no run open it only dies, as the default would
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _installed_in = None


_inside = 0  # the main thread's depth in `deferred` sections
_pending: list[Callable[[], None]] = []  # what signal handlers asked for inside one: run when the outermost ends
_sigterm_waits = False  # our handler's run is pending: a second SIGTERM does not wait


@contextmanager
def deferred() -> Iterator[None]:
    """A section in which the main thread holds locks that ending a run takes (the hand-over of a step to the
    sink): what a signal handler `defer`s inside it runs when it ends, once its locks are released (an
    exception that the handler raised, `sys.exit`'s, releases them on its way out). On other threads, a
    plain section (Python runs signal handlers on the main thread only)."""
    global _inside
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _inside += 1
    try:
        yield
    finally:
        _inside -= 1
        while not _inside and _pending:
            _pending.pop(0)()


def defer(fn: Callable[[], None]) -> bool:
    """Queue `fn` for the end of the main thread's outermost `deferred` section, when called inside one (from a
    signal handler: nothing else runs there); False, queuing nothing, anywhere else: call `fn` now."""
    if _inside and threading.current_thread() is threading.main_thread():
        _pending.append(fn)
        return True
    return False


def _on_sigterm(signum: int, frame: Any) -> None:
    global _sigterm_waits
    if not _sigterm_waits and defer(lambda: _on_sigterm(signum, None)):  # once the hand-over is done
        _sigterm_waits = True
        return
    _sigterm_waits = False
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        runs = list(_open.values()) if os.getpid() == _installed_in else []
        if runs:
            _end_preempted(runs)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # the default action now: the process dies of SIGTERM


def _end_preempted(runs: list[Any]) -> None:
    # Off this thread: it may have been stopped inside the telemetry, holding a lock that shutdown takes.
    closers = [threading.Thread(target=r.shutdown, kwargs={"preempted": True}, name="otel-grpo-preempted",
                                daemon=True) for r in runs]
    for closer in closers:
        closer.start()
    bound = max(r.settings.shutdown_timeout_s + r.settings.prometheus_linger_s for r in runs)  # shutdown's own
    deadline = time.monotonic() + bound + 1.0
    for closer in closers:
        closer.join(max(deadline - time.monotonic(), 0.0))
