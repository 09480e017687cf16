"""`Latest`: a call that may hang runs on one thread of its own, at most one at a time, and its last
answer is reused (the store-size gauge and /readyz both ask the database through it)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from otel_grpo.sidecar._latest import Latest


class Gate:
    """A call that answers 1, 2, ... once let through, and raises where told."""

    def __init__(self, fail_on: int = 0) -> None:
        self.calls = 0
        self.fail_on = fail_on
        self.go = threading.Event()

    def __call__(self) -> int:
        self.calls += 1
        assert self.go.wait(timeout=30), "never let through"
        if self.calls == self.fail_on:
            raise OSError("the database is away")
        return self.calls


def test_one_call_in_flight_and_a_failed_one_keeps_the_last_answer():
    call = Gate(fail_on=2)
    latest = Latest(call, fresh_s=3600.0, name="test")
    try:
        assert latest.value is None  # nothing answered yet (stale): this started the first call
        first = latest.renew()
        assert latest.renew() is first and latest.value is None  # still in flight: no second call
        call.go.set()
        assert first.result(timeout=30) == 1 and latest.value == 1  # fresh now: reused, no new call
        with pytest.raises(OSError):
            latest.renew().result(timeout=30)
        assert latest.value == 1  # the failure kept the last answer
        assert latest.renew().result(timeout=30) == 3 and latest.value == 3
        assert call.calls == 3  # one call per renewal, never one per reader
    finally:
        latest.close()


def test_fresh_reuses_a_fresh_answer_and_gives_up_on_a_hung_call_without_ending_it():
    call = Gate()
    latest = Latest(call, fresh_s=3600.0, name="test")

    async def main():
        with pytest.raises(TimeoutError):
            await latest.fresh(0.05)  # hung: the caller gives up, the call goes on
        call.go.set()
        assert await latest.fresh(30) == 1  # the same call's answer, not a second call
        assert await latest.fresh(30) == 1 and call.calls == 1  # fresh: reused

    try:
        asyncio.run(main())
    finally:
        latest.close()
