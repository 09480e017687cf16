"""A small filesystem that fills for real: a tmpfs mounted for one test (needs root: CAP_SYS_ADMIN).

    with small_tmpfs(path, "4m") as mnt:   # path: an existing empty directory
        ...
        resize(mnt, 8192)                  # KiB: room again, the files kept
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path`, unmounted after; the test is skipped, saying why, where none can be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def resize(path: Path, size_kib: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(path)], check=True, capture_output=True)
