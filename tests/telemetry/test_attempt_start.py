"""A process's first attempt (`grpo.attempt`): its start where a job's ranks must agree, else the moment it asks.

A notebook's kernel started before a job that a later launch crashed resumes the run: its attempt was its start,
older than the crashed job's, and the sidecar dropped the resumed steps as stale."""

from __future__ import annotations

import subprocess
import sys

import pytest

# `asked` on the process's own clock (`_clock`: the wall clock read once, then the monotonic one), which the
# attempt is taken on: the wall clock read again may be ahead of it by NTP's slewing since.
CODE = ("import time; time.sleep(1.5); from otel_grpo.telemetry import _clock; "
        "from otel_grpo.telemetry._attempt import next_attempt; "
        "asked = _clock.now_ns(); print(next_attempt(ranks={ranks}), asked, next_attempt(ranks={ranks}))")


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_first_attempt_is_the_process_start_only_for_a_job_of_ranks(ranks):
    out = subprocess.run([sys.executable, "-c", CODE.format(ranks=ranks)], capture_output=True, text=True,
                         timeout=60, check=True)
    first, asked, later = map(int, out.stdout.split())
    if ranks == 1:
        assert first >= asked  # the moment it asked, after the process's 1.5 s of set-up
    else:
        assert asked - first >= 1.4e9  # the process's start, which the job's other ranks share
    assert later > first and later >= asked  # a later attempt is newer, and its own moment
