"""Why a path the user gave cannot be written, in words, before anything starts.

    problem = path_problem(Path("/etc/passwd/x.db"), "--db")
    # "--db /etc/passwd/x.db: /etc/passwd is a file, not a directory"

An OSError's own text is about the call that failed ("File exists", "No such file or
directory" for a directory /proc refuses to create), not about what to change.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

_REASONS = {
    errno.EROFS: "is on a read-only file system",
    errno.EACCES: "is not writable (permission denied)",
    errno.EPERM: "is not writable (operation not permitted)",
    errno.ENOSPC: "is on a full disk (no space left)",
    errno.ENOTDIR: "is below a file, not a directory",
    errno.ENOENT: "cannot be created there",
}


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def path_problem(path: Path, flag: str, *, directory: bool = False) -> str | None:
    """What stops us from creating or writing `path` (a directory if `directory`), or None."""
    target = path.absolute()
    existing = _existing_ancestor(target)
    if existing == target:
        if directory and not target.is_dir():
            return f"{flag} {path}: is a file, not a directory"
        if not directory and target.is_dir():
            return f"{flag} {path}: is a directory, not a file"
        parent = target if directory else target.parent
    else:
        if not existing.is_dir():
            return f"{flag} {path}: {existing} is a file, not a directory"
        parent = existing
    if not os.access(parent, os.W_OK | os.X_OK):
        read_only = os.statvfs(parent).f_flag & os.ST_RDONLY
        return f"{flag} {path}: {parent} {_REASONS[errno.EROFS] if read_only else _REASONS[errno.EACCES]}"
    return None


def os_error_line(error: OSError, path: Path, flag: str) -> str:
    """An OSError met while creating `path`, as one line naming the flag."""
    reason = _REASONS.get(error.errno or 0, (error.strerror or str(error)).lower())
    where = error.filename if error.filename not in (None, str(path)) else path
    return f"{flag} {path}: {where} {reason}" if where != path else f"{flag} {path}: {reason}"
