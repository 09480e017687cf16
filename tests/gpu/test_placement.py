"""More of torchrun's processes on a node than it has GPUs: one readable line, not NCCL's "Duplicate GPU"
(skipped without CUDA; with none, device auto trains on the CPU, where any number of processes may)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

REPO = Path(__file__).resolve().parents[2]


def test_more_processes_than_gpus_fails_before_training_with_one_line_per_rank(tmp_path: Path) -> None:
    gpus = torch.cuda.device_count()
    out = tmp_path / "never"
    env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(gpus + 1), "-m", "otel_grpo.cli", "train", "--preset", "tiny", "--no-progress",
                           "--output-dir", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("otel-grpo train: invalid config:")]
    assert len(ours) == gpus + 1, proc.stderr[-3000:]
    assert f"{gpus + 1} processes on this node share {gpus} CUDA GPU(s)" in ours[0]
    assert "NCCL" not in proc.stderr and not out.exists()
