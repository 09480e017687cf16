"""Make `trl_run` (a plain module beside the tests, also run by torchrun) importable; no downloads;
accelerate's process-wide state reset after each test."""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """A TRL Trainer initialises accelerate's process-wide state; later tests in this process
    (the demo trainer's own `Accelerator(mixed_precision=...)`) need it fresh, as a new process has it."""
    yield
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
