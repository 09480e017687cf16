"""Reading a request body with a size limit that also bounds gzip inflation.

A gzip bomb is stopped while inflating: each `decompress` call is given
`max_length`, so memory never holds more than the limit plus one chunk.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import AsyncIterable


class BodyError(Exception):
    """The body cannot be taken: `status` is the HTTP status to answer with."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def _too_large(limit: int) -> BodyError:
    return BodyError(413, "too_large", f"request body exceeds the limit of {limit} bytes after decompression")


class _Inflater:
    """Inflates gzip members (concatenated members too) up to `limit` bytes in total."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.out = bytearray()
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> None:
        while data:
            room = self.limit - len(self.out) + 1  # one byte past the limit proves it is exceeded
            try:
                chunk = self._d.decompress(data, room)
            except zlib.error as exc:
                raise BodyError(400, "malformed", f"invalid gzip body: {exc}") from None
            self.out += chunk
            if len(self.out) > self.limit:
                raise _too_large(self.limit)
            if self._d.unconsumed_tail:
                data = self._d.unconsumed_tail
            elif self._d.eof and self._d.unused_data:
                data = self._d.unused_data  # next gzip member
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                data = b""

    def finish(self) -> bytes:
        if not self._d.eof:
            raise BodyError(400, "malformed", "truncated gzip body")
        return bytes(self.out)


async def read_body(chunks: AsyncIterable[bytes], encoding: str | None, limit: int,
                    timeout_s: float | None = None) -> tuple[bytes, int]:
    """Read the whole body, inflating `gzip`; returns (decoded bytes, bytes on the wire).

    Raises BodyError: 413 past `limit` (counted after decompression), 415 for an
    unsupported content encoding, 400 for broken gzip, 408 when the whole body has not
    arrived within `timeout_s` (a client trickling bytes must not hold the server).
    """
    if timeout_s is None:
        return await _read(chunks, encoding, limit)
    try:
        return await asyncio.wait_for(_read(chunks, encoding, limit), timeout_s)
    except asyncio.TimeoutError:
        raise BodyError(408, "body_timeout", f"request body not received within {timeout_s:g} s") from None


async def _read(chunks: AsyncIterable[bytes], encoding: str | None, limit: int) -> tuple[bytes, int]:
    encoding = (encoding or "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise BodyError(415, "unsupported_encoding", f"unsupported Content-Encoding {encoding!r}: use gzip or none")
    wire = 0
    if encoding == "identity":
        buf = bytearray()
        async for chunk in chunks:
            wire += len(chunk)
            buf += chunk
            if len(buf) > limit:
                raise _too_large(limit)
        return bytes(buf), wire
    inflater = _Inflater(limit)
    async for chunk in chunks:
        wire += len(chunk)
        inflater.feed(chunk)
    return inflater.finish(), wire
