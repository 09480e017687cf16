"""Run a command whose children must not outlive it (torchrun and its workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]


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


def run_two_ranks(script: Path, *args: str, timeout: float = 240, env: dict[str, str] | None = None,
                  **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`script` under `torchrun --standalone --nproc_per_node 2` (gloo on CPU); AssertionError with its output on failure.

    The script's folder and the repository (for `tests._support`) go on PYTHONPATH; one
    OpenMP thread per rank, so two ranks share the two cores without oversubscribing.
    """
    path = os.pathsep.join([str(script.parent), str(_REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script), *args]
    done = run_group(argv, timeout=timeout, env=env, **kwargs)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done
