"""Body reading: gzip inflation is bounded while inflating; encodings; concatenated members."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from otel_grpo.sidecar.otlp import BodyError, read_body
from otel_grpo.sidecar.otlp._body import _Inflater


async def _chunks(data: bytes, size: int = 4096):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _read(data: bytes, encoding: str | None, limit: int) -> bytes:
    return asyncio.run(read_body(_chunks(data), encoding, limit))[0]


def test_gzip_bomb_is_stopped_while_inflating():
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), 9)  # 64 MiB in ~64 KiB
    inflater = _Inflater(limit=1024 * 1024)
    with pytest.raises(BodyError) as err:
        for i in range(0, len(bomb), 4096):
            inflater.feed(bomb[i:i + 4096])
    assert err.value.status == 413
    assert len(inflater.out) <= 1024 * 1024 + 1  # never held more than the limit (plus the one proving byte)


def test_exactly_the_limit_passes_and_one_more_byte_does_not():
    assert _read(gzip.compress(b"a" * 1000), "gzip", 1000) == b"a" * 1000
    with pytest.raises(BodyError):
        _read(gzip.compress(b"a" * 1001), "gzip", 1000)
    assert _read(b"a" * 1000, None, 1000) == b"a" * 1000
    with pytest.raises(BodyError):
        _read(b"a" * 1001, "identity", 1000)


def test_concatenated_gzip_members_and_case_insensitive_encoding():
    assert _read(gzip.compress(b"abc") + gzip.compress(b"def"), "GZIP", 100) == b"abcdef"


@pytest.mark.parametrize("data,encoding,status", [
    (b"abc", "deflate", 415), (b"abc", "br", 415), (b"not gzip", "gzip", 400), (gzip.compress(b"x" * 50, mtime=0)[:-4], "gzip", 400),
])
def test_bad_bodies(data, encoding, status):
    with pytest.raises(BodyError) as err:
        _read(data, encoding, 1000)
    assert err.value.status == status
