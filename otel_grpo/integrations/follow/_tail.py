"""Reading a growing file line by line from a byte offset: partial lines, truncation, rotation.

    tail = LineTail(path, offset=0)
    for line, end in tail.read():      # complete lines only; `end` is the offset after the line
        ...
    tail.position                       # what to save: (inode, offset of the next unread byte)

A writer that has not finished its last line leaves it unread until the newline
arrives. A file that shrinks below the offset (truncated, or rewritten by a
restarted writer opening it with "w") is read again from 0; a path that now names
another file (rotation) is read from 0 after the old file's complete lines.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

logger = logging.getLogger("otel_grpo.follow")

READ_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Position:
    """Where to resume: the file's identity and the offset of its next unread byte."""

    inode: int
    offset: int


class LineTail:
    """One followed file. Not thread-safe; one reader."""

    def __init__(self, path: str | os.PathLike[str], position: Position | None = None) -> None:
        self.path = Path(path)
        self._fp: BinaryIO | None = None
        self._inode = position.inode if position else 0
        self._offset = position.offset if position else 0
        self._at_eof = False
        self.resets = 0
        """Times the file was found truncated or replaced (each read again from 0)."""

    @property
    def position(self) -> Position:
        return Position(self._inode, self._offset)

    def seek_end(self) -> None:
        """Skip what the file holds now (`follow` without `--from-start`): only new lines are read."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return
        self._inode, self._offset = stat.st_ino, stat.st_size

    def _open(self) -> bool:
        """Open the path if it exists; a different inode than the saved one means a new file."""
        try:
            fp = open(self.path, "rb")
        except FileNotFoundError:
            return False
        inode = os.fstat(fp.fileno()).st_ino
        if self._inode and inode != self._inode:
            logger.warning("otel-grpo follow: %s was replaced; reading the new file from the start", self.path)
            self.resets += 1
            self._offset = 0
        self._inode, self._fp = inode, fp
        return True

    def _check_replaced(self) -> bool:
        """True if the path now names another file, or the open file shrank below the offset."""
        assert self._fp is not None
        size = os.fstat(self._fp.fileno()).st_size
        if size < self._offset:
            logger.warning("otel-grpo follow: %s was truncated (%d < %d bytes read); reading it again from 0",
                           self.path, size, self._offset)
            self.resets += 1
            self._offset = 0
            return False
        try:
            return self.path.stat().st_ino != self._inode
        except FileNotFoundError:
            return False  # removed: keep reading what the open descriptor still holds

    def read(self, max_bytes: int = 64 * READ_BYTES) -> Iterator[tuple[bytes, int]]:
        """Complete lines from the saved offset on, each with the offset just past it."""
        if self._fp is None and not self._open():
            return
        replaced = self._check_replaced()
        yield from self._lines(max_bytes)
        if replaced and self._at_eof:  # the old file's lines are read; its partial last line never completes
            self._fp.close()  # type: ignore[union-attr]
            self._fp = None
            self._inode = 0
            self._offset = 0
            self.resets += 1
            logger.warning("otel-grpo follow: %s was rotated; following the new file from the start", self.path)
            if self._open():
                yield from self._lines(max_bytes)

    def _lines(self, max_bytes: int) -> Iterator[tuple[bytes, int]]:
        fp = self._fp
        assert fp is not None
        fp.seek(self._offset)
        buf, buf_start, read = b"", self._offset, 0  # buf_start: file offset of buf[0]
        self._at_eof = False
        while read < max_bytes:
            chunk = fp.read(READ_BYTES)
            if not chunk:
                self._at_eof = True
                break
            read += len(chunk)
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                self._offset = buf_start + nl + 1
                yield buf[start:nl], self._offset
                start = nl + 1
            buf, buf_start = buf[start:], buf_start + start

    def close(self) -> None:
        if self._fp is not None:
            self._fp.close()
            self._fp = None

