"""Work a job shows by writing files: a long checkpoint save is progress, not a stall.

    watch = WriteWatch("runs/exp-42")       # takes what the folder holds now
    watch.changed()                         # True once anything there changed since the last look

    with telemetry.beat_while_writing("runs/exp-42"):   # a save of your own loop
        save_checkpoint(model, "runs/exp-42/checkpoint-500")

`WriteBeats` looks every few seconds from a thread of its own and sends a heartbeat
(`Telemetry.heartbeat`) when it finds a change: a save that writes keeps the stall alerts
quiet however long it takes, and one stuck on a hung file system, or in a collective, writes
nothing and gets no beat. Only a change on disk counts as work, never the passing of time,
so the thread cannot hide a hang. `instrument`, `OtelGrpoCallback` and `otel-grpo follow`
use the same watch.

A look reads the folder's entries (name, size, modification time) and, down the chain, those
of its most recently changed subfolder: a save writes into one new folder (`checkpoint-500`,
`global_step_500`), so that chain holds it, and a folder keeping a hundred checkpoints costs
a hundred `stat` calls a look, not their every file.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable

logger = logging.getLogger("otel_grpo.telemetry")
LOOK_EVERY_S = 5.0
"""Seconds between two looks: well inside the stall alerts' minutes, few enough `stat` calls."""
_DEPTH = 8  # folders down the chain: a sharded save nests 2-3 deep


def path_state(path: Path) -> tuple:
    """What `path` holds, to compare with a later look: each folder of the chain's entries (name, size,
    modification time), the chain descending into the most recently changed subfolder; a file's own size
    and time. A path that is missing or unreadable is a state too (its appearing is a change)."""
    state: list[tuple] = []
    folder: Path | None = path
    for _ in range(_DEPTH):
        if folder is None:
            break
        entries, newest, newest_ns = [], None, -1
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # removed between the listing and its stat (a rotated checkpoint)
                        continue
                    entries.append((entry.name, st.st_size, st.st_mtime_ns))
                    if entry.is_dir(follow_symlinks=False) and st.st_mtime_ns > newest_ns:
                        newest, newest_ns = Path(entry.path), st.st_mtime_ns
        except NotADirectoryError:  # a file (`torch.save` into one): its own size and time
            state.append(_file_state(folder))
            break
        except OSError as exc:  # not there yet, no permission
            state.append((str(folder), type(exc).__name__))
            break
        state.append(tuple(sorted(entries)))
        folder = newest
    return tuple(state)


def _file_state(path: Path) -> tuple:
    try:
        st = path.stat()
    except OSError as exc:  # removed since the listing
        return (str(path), type(exc).__name__)
    return (str(path), st.st_size, st.st_mtime_ns)


class WriteWatch:
    """Whether the files under one folder changed between two calls of `changed()`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._state = path_state(self.path)

    def changed(self) -> bool:
        state = path_state(self.path)
        changed, self._state = state != self._state, state
        return changed


class WriteBeats:
    """A context manager: while its block runs, `beat()` is called after each look (every `every_s`) that finds
    the files under `path` changed. `beat` None: nothing is watched (a rank that does not export)."""

    def __init__(self, beat: Callable[[], None] | None, path: str | os.PathLike[str],
                 every_s: float | None = None) -> None:
        self._beat = beat
        self._path = path
        self._every_s = LOOK_EVERY_S if every_s is None else every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "WriteBeats":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._beat is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="otel-grpo-write-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the looks (at once: the thread is not waited for, a look in flight ends on its own)."""
        self._stop.set()

    def _run(self) -> None:
        try:
            # the first look is the baseline, taken here: on a network file system a look can take a
            # while, and the training thread that starts the watch should not wait for it
            watch = WriteWatch(self._path)
            while not self._stop.wait(self._every_s):
                if watch.changed():
                    self._beat()  # type: ignore[misc]
        except Exception:  # said, not raised: the work goes on without beats (a long one may then page)
            logger.warning("otel-grpo: watching %s for writes failed; no heartbeats until it ends", self._path,
                           exc_info=True)
