"""Reading a growing file line by line from a byte offset: partial lines, truncation, rotation, hostile files.

    tail = LineTail(path, bad=BadInput("verl-metrics"))
    for line, end in tail.read():      # complete lines only; `end` is the offset after the line
        ...
    tail.position                       # what to save: inode, offset of the next unread byte, check

A writer that has not finished its last line leaves it unread until the newline
arrives. A file that shrinks below the offset (truncated, or rewritten by a
restarted writer opening it with "w") is read again from 0, and so is one whose
bytes before the offset are no longer the line read there (truncated and grown
past the offset while nobody watched); a path that now names another file
(rotation) is read from 0 after the old file's complete lines.

Hostile content never stops the reader: a line longer than `max_line` is skipped
(reported once with its offset) while its bytes stream past, and a path that is
not a regular file (a FIFO, a symlink to /dev/zero) or cannot be opened is
reported once and retried on later reads. Memory is bounded by `max_line` plus
one read chunk, whatever the file holds.
"""

from __future__ import annotations

import logging
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from ._records import BadInput

logger = logging.getLogger("otel_grpo.follow")

READ_BYTES = 1 << 20
MAX_LINE = 64 << 20
CHECK_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class Position:
    """Where to resume: the file's identity, the offset of its next unread byte, and a check of the line
    that ends there (None at offset 0 or where unknown)."""

    inode: int
    offset: int
    check: int | None = None
    """CRC-32 of the line ending at `offset`, its newline included (of its last `CHECK_BYTES` if longer)."""
    check_len: int = 0
    """That line's length, its newline included."""
    at_end: bool = False
    """`offset` is the file's size when following began (`mark_end`), not yet read: reading starts after
    the last complete line before it (a partial last line is read once its newline arrives)."""


def line_check(line: bytes) -> int:
    """`Position.check` of a line (`line` without its newline)."""
    return zlib.crc32(b"\n", zlib.crc32(line[max(len(line) + 1 - CHECK_BYTES, 0):]))


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file; `OSError` otherwise (`ValueError` for a FIFO,
    device or directory).

    The type is read with `stat`, before any open: opening a FIFO's read end, even for an instant,
    lets a writer blocked in its own open (verl's file logger) through, and its first write then dies
    of a broken pipe once we close ours. The open is non-blocking and checked to be the file stat
    saw, so a path swapped in between is refused too and never hangs the caller.
    """
    seen = os.stat(path)
    if not stat.S_ISREG(seen.st_mode):
        raise ValueError(f"not a regular file (a {_kind(seen.st_mode)})")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (seen.st_dev, seen.st_ino):
            raise ValueError("replaced by another file while it was opened")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "directory" if stat.S_ISDIR(mode) else "special file"


class LineTail:
    """One followed file. Not thread-safe; one reader."""

    def __init__(self, path: str | os.PathLike[str], position: Position | None = None, *,
                 bad: BadInput | None = None, max_line: int = MAX_LINE) -> None:
        self.path = Path(path)
        self.bad = bad or BadInput(str(path))
        self.max_line = max_line
        self._fp: BinaryIO | None = None
        self._inode = position.inode if position else 0
        self._offset = position.offset if position else 0
        self._check = position.check if position else None
        self._check_len = position.check_len if position else 0
        self._at_end = position.at_end if position else False
        self._skipping = False  # inside a line over max_line: discard up to its newline
        self.at_eof = False
        """The last `read` reached the end of the file."""
        self.resets = 0
        """Times the file was found truncated or replaced (each read again from 0)."""

    @property
    def position(self) -> Position:
        if self._at_end:
            return Position(self._inode, self._offset, at_end=True)
        if self._skipping or self._check is None:
            return Position(self._inode, self._offset)
        return Position(self._inode, self._offset, self._check, self._check_len)

    def mark_end(self) -> None:
        """Skip what the file holds now (`follow` without `--from-start`): only what is written from now on
        is read. Decided with `stat` alone, so that it is taken at once, also for a file that cannot be
        read yet; the first read starts at the end of the last complete line before this size.
        """
        try:
            info = os.stat(self.path)
        except OSError:
            return  # absent or not reachable now: read from 0 once it appears
        if stat.S_ISREG(info.st_mode):
            self._inode, self._offset, self._check, self._check_len = info.st_ino, info.st_size, None, 0
            self._at_end = True

    def _settle_end(self, fd: int) -> None:
        """The offset `mark_end` took, moved back to the end of the last complete line before it, with its check."""
        self._at_end = False
        size = self._offset
        window = os.pread(fd, min(size, READ_BYTES), max(size - READ_BYTES, 0))
        if len(window) < min(size, READ_BYTES):
            self._restart()  # shrank meanwhile: `_check_replaced` would read it again from 0 anyway
            return
        cut = window.rfind(b"\n") + 1  # 0: no complete line in the window
        self._offset = size - len(window) + cut
        start = window.rfind(b"\n", 0, max(cut - 1, 0)) + 1
        known = cut and (start > 0 or len(window) == size)  # the last line starts in the window
        self._check = line_check(window[start:cut - 1]) if known else None
        self._check_len = cut - start

    def _open(self) -> bool:
        """Open the path if it is readable; a different inode than the saved one means a new file."""
        try:
            fp = open_regular(self.path)
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            self.bad.unreadable(self.path, str(exc))
            return False
        self.bad.readable(self.path)
        inode = os.fstat(fp.fileno()).st_ino
        if self._inode and inode != self._inode:
            logger.warning("otel-grpo follow: %s was replaced; reading the new file from the start", self.path)
            self._restart()
        self._inode, self._fp = inode, fp
        if self._at_end:
            self._settle_end(fp.fileno())
        return True

    def _restart(self) -> None:
        self.resets += 1
        self._offset, self._check, self._skipping, self._at_end = 0, None, False, False

    def _check_replaced(self) -> bool:
        """True if the path now names another file; reads again from 0 if the open file shrank below the
        offset or no longer holds the line that ended there."""
        assert self._fp is not None
        fd = self._fp.fileno()
        size = os.fstat(fd).st_size
        if size < self._offset:
            logger.warning("otel-grpo follow: %s was truncated (%d < %d bytes read); reading it again from 0",
                           self.path, size, self._offset)
            self._restart()
        elif self._offset and self._check is not None and not self._skipping and not self._holds_last_line(fd):
            logger.warning("otel-grpo follow: %s was rewritten (the line ending at byte %d is not the one "
                           "read there); reading it again from 0", self.path, self._offset)
            self._restart()
        try:
            return self.path.stat().st_ino != self._inode
        except FileNotFoundError:
            return False  # removed: keep reading what the open descriptor still holds

    def _holds_last_line(self, fd: int) -> bool:
        """The file still holds the line read last, ending at the offset (its check and its start)."""
        covered = min(self._check_len, CHECK_BYTES)
        start = self._offset - covered
        if start < 0:
            return False
        data = os.pread(fd, covered, start)
        if len(data) != covered or not data.endswith(b"\n") or zlib.crc32(data) != self._check:
            return False
        return covered < self._check_len or start == 0 or os.pread(fd, 1, start - 1) == b"\n"

    def read(self, max_bytes: int | None = None) -> Iterator[tuple[bytes, int]]:
        """Complete lines from the saved offset on, each with the offset just past it; at most about
        `max_bytes` read per call (a backlog streams over several calls). The default, `max_line` plus
        two chunks, lets every line up to `max_line` complete within one call from its start."""
        max_bytes = self.max_line + 2 * READ_BYTES if max_bytes is None else max_bytes
        self.at_eof = False
        try:
            if self._fp is None and not self._open():
                return
            replaced = self._check_replaced()
            yield from self._lines(max_bytes)
            if replaced and self.at_eof:  # the old file's lines are read; its partial last line never completes
                self.close()
                self._inode = 0
                self._restart()
                logger.warning("otel-grpo follow: %s was rotated; following the new file from the start", self.path)
                if self._open():
                    yield from self._lines(max_bytes)
        except OSError as exc:  # permissions changed, an I/O error: report once, close, retry next time
            self.bad.unreadable(self.path, f"{type(exc).__name__}: {exc}")
            self.close()

    def _lines(self, max_bytes: int) -> Iterator[tuple[bytes, int]]:
        fp = self._fp
        assert fp is not None
        fd = fp.fileno()
        buf, buf_start, read = bytearray(), self._offset, 0  # buf_start: file offset of buf[0]
        self.at_eof = False
        while read < max_bytes:
            chunk = os.pread(fd, READ_BYTES, buf_start + len(buf))
            if not chunk:
                self.at_eof = True
                break
            read += len(chunk)
            if self._skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    buf_start = self._offset = buf_start + len(chunk)
                    continue
                self._skipping = False
                buf_start = self._offset = buf_start + nl + 1
                self._check = None
                chunk = chunk[nl + 1:]
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                line = bytes(buf[start:nl])
                self._offset = buf_start + nl + 1
                self._check, self._check_len = line_check(line), len(line) + 1
                if len(line) > self.max_line:
                    self.bad.skip(f"{self.path}:{buf_start + start}", f"a line longer than {self.max_line} bytes")
                else:
                    yield line, self._offset
                start = nl + 1
            del buf[:start]
            buf_start += start
            if len(buf) > self.max_line:
                self.bad.skip(f"{self.path}:{buf_start}", f"a line longer than {self.max_line} bytes")
                self._skipping = True
                buf_start = self._offset = buf_start + len(buf)
                buf.clear()

    @property
    def is_open(self) -> bool:
        return self._fp is not None

    def close(self) -> None:
        if self._fp is not None:
            self._fp.close()
            self._fp = None
