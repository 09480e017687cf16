"""The follower's saved progress: one small JSON file, replaced atomically after each emitted batch.

    state = State.load(path)            # empty if the file does not exist
    state.sources["verl-metrics"] = {...}
    state.save()                        # write to a temporary file, fsync, rename

The batch is flushed to the exporters before `save`, so a follower killed at any
moment resumes at a line it has not emitted or at the first line after the batch it
has: nothing is skipped, and only a kill between the flush and the rename (a window
of one file write) can send a batch twice.

    state.lock()                        # one follower per state file; ValueError naming the holder

Two followers saving one state would each send every line: `lock` takes an exclusive
`flock` on `<state>.lock` (released when the process ends, however it ends).
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = 1


@dataclass(slots=True)
class State:
    path: Path
    run_id: str | None = None
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per source name: whatever that source needs to resume (offsets, files done)."""
    attempt: int | None = None
    """The follower's own attempt (`grpo.attempt`), for the records whose source names none: when it first
    read the job's files. Kept across restarts: a newer one would take the steps over from the records this
    follower sent before (the sidecar's relaunch rule), and those it does not send again would go."""
    _lock_fd: int | None = field(default=None, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> State:
        """The saved state, or an empty one; `ValueError` naming the file if it is not ours."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"state file {path}: unreadable ({exc})") from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"state file {path}: not an otel-grpo follow state (version {VERSION})")
        attempt = doc.get("attempt")
        return cls(path, doc.get("run_id"), dict(doc.get("sources", {})), attempt if type(attempt) is int else None)

    def lock(self) -> None:
        """Hold the state file for this process; `ValueError` naming the holder's pid if another has it."""
        if self._lock_fd is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ValueError(f"state file {self.path}: cannot be written there ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(f"state file {self.path} is in use by another otel-grpo follow (pid {holder}): "
                             "one follower per state file (give another --state to follow twice)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        body = json.dumps({"version": VERSION, "run_id": self.run_id, "sources": self.sources, "attempt": self.attempt},
                          sort_keys=True)
        with open(tmp, "w") as fp:
            fp.write(body)
            fp.flush()
            os.fsync(fp.fileno())
        os.replace(tmp, self.path)
