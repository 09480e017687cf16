"""Span ids derived from what a span is, not drawn at random, so a step emitted twice is stored once.

    provider = TracerProvider(id_generator=DerivedIds())
    with derived_ids("exp-42", 7, "grpo.step", attempt, start_ns):
        span = tracer.start_span("grpo.step", start_time=start_ns)   # the same ids every time

Emission is at least once: when the telemetry process dies before it acknowledged a step, the trainer
emits that step again, and the child may have exported it already. The sidecar's writes are upserts by
span id (phases) and by (run, step, sample index) (samples), so a step made again with the same ids
changes nothing there, where random ids would have added its phase durations a second time. A span
started outside `derived_ids` (or by a tracer provider of the caller's) gets random ids as usual.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

_NEXT: ContextVar[tuple[int, int] | None] = ContextVar("otel_grpo_next_span_ids", default=None)


class DerivedIds(RandomIdGenerator):
    """Random ids, except inside `derived_ids`: there, the ids its key names."""

    def generate_span_id(self) -> int:
        ids = _NEXT.get()
        return ids[1] if ids else super().generate_span_id()

    def generate_trace_id(self) -> int:  # asked for a root span only: a child span takes its parent's
        ids = _NEXT.get()
        return ids[0] if ids else super().generate_trace_id()


@contextmanager
def derived_ids(*key: object) -> Iterator[None]:
    """Spans started inside get the trace and span ids of `key` (JSON values); nonzero, as OTel requires."""
    digest = hashlib.blake2b(json.dumps(key, default=str).encode(), digest_size=24).digest()
    trace_id, span_id = int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:], "big") or 1
    token = _NEXT.set((trace_id, span_id))
    try:
        yield
    finally:
        _NEXT.reset(token)
