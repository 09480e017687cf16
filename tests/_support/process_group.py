"""Run a command whose children must not outlive it (torchrun and its workers)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def run_group(argv: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a new session; on timeout the whole process group is killed.

    Plain `subprocess.run(timeout=...)` kills only the direct child, so a hung
    torchrun would leave its worker processes running after the test.
    """
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{argv[0]} did not finish in {timeout} s:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
