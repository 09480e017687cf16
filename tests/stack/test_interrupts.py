"""`interrupts_held`: Ctrl-C and SIGTERM wait for the block that spawns a child and keeps its Popen."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from otel_grpo.stack._process import interrupts_held


def test_a_ctrl_c_in_the_block_is_raised_once_the_block_is_done():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("after the signal")  # the block goes on
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigterm_reaches_its_own_handler_after_the_block_and_the_handlers_come_back():
    got = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]  # once: a held signal goes on once, however often it came
        with interrupts_held():
            pass
        assert got == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


def test_outside_the_main_thread_the_block_runs_as_is():
    ran, errors = [], []

    def worker() -> None:
        try:
            with interrupts_held():  # signal.signal would raise here: handlers belong to the main thread
                ran.append(signal.getsignal(signal.SIGINT))
        except Exception as e:  # signal.signal outside the main thread: ValueError
            errors.append(e)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors == [] and ran == [signal.default_int_handler]
