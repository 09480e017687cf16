"""Keep freed memory in the heap, so multi-MiB request bodies do not page-fault every time.

Each ingest request moves a body of one to a few MiB through several buffers (the socket
reads, h11's buffer, the ASGI message, ours, the worker's parse). With glibc's defaults a
free of such a block hands it back to the kernel (the heap top is trimmed past 128 KiB, and
blocks past the mmap threshold are unmapped), so the next request faults every page in
again and the kernel zeroes it: on a plain Starlette endpoint taking such bodies, raising
the two thresholds cut the server's CPU per request by more than half, most of what it saved
in the kernel (benchmarks/README.md, sidecar: figures the code's comments point to).

The cost: the process keeps up to `TRIM_BYTES` of freed heap resident per malloc arena. glibc
gives each new thread an arena of its own, up to 8 per core, and the server reads on up to 40
threads: concurrent queries multiplied its resident memory, kept for good
(benchmarks/README.md, costs). So the arenas are capped at `ARENAS` (the GIL serializes the
Python threads anyway, so they hardly contend).

What stays free is given back in the background (`release_free_heap`, the sidecar's maintenance
every `heap_release_s`): a burst of large reads left the server at its peak for good, whatever it
held afterwards, since the arenas keep up to `TRIM_BYTES` each and blocks freed between live ones
are never trimmed at all; with the release it falls back within a minute (benchmarks/README.md,
read_burst). The bodies that follow fault their pages in again once per release, not per request.
glibc only; on another C library (musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger("otel_grpo.sidecar")

# mallopt parameters, from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
ARENAS = 2
TRIM_BYTES = 64 * 1024 * 1024  # free heap kept before trimming: a few in-flight bodies
MMAP_BYTES = 32 * 1024 * 1024  # glibc's ceiling for this threshold on 64-bit; larger blocks are mmapped


@functools.cache
def _glibc():
    """The C library if it is glibc (it has `mallopt` and `malloc_trim`); else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed_heap() -> bool:
    """Cap glibc's arenas and raise its trim and mmap thresholds for this process; False where it
    cannot (not glibc). Call it before the process starts threads."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    ok = (bool(mallopt(_M_ARENA_MAX, ARENAS)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES))
          and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)))
    if not ok:
        log.debug("mallopt refused the heap thresholds; the allocator keeps its defaults")
    return ok


def release_free_heap() -> bool:
    """Hand the kernel every whole free page of every arena, wherever it lies (glibc's `malloc_trim(0)`:
    the heap's top, and the unused pages of free blocks between live ones); False where it cannot (not
    glibc). The arenas are locked meanwhile: call it off the event loop."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
