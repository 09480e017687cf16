"""A demo run killed mid-run and resumed from its checkpoint, into a real sidecar on both backends: every step
the resumed attempt sends again shows its own completions and scalars, never the killed attempt's beside them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from otel_grpo.catalog.spans import ATTEMPT_ATTR
from otel_grpo.telemetry._spill import SpillReader
from tests._support.waiting import wait_for

from .conftest import ROOT

pytestmark = pytest.mark.integration
RUN = "resumed-demo"


def _train(sidecar_url: str, out: Path, *settings: str, resume: bool = False) -> subprocess.Popen:
    env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "otlp",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{sidecar_url}/v1/traces",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    sets = [arg for s in ("steps=8", "checkpoint_every=2", "min_step_seconds=1", "progress=false", *settings)
            for arg in ("--set", s)]
    return subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "train", "--preset", "tiny", "--run-id", RUN,
                             "--output-dir", str(out), *sets, *(["--resume"] if resume else [])],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_resumed_demo_run_replaces_the_killed_attempts_steps(sidecar_factory, db, tmp_path):
    sidecar = sidecar_factory(db=db)
    out = tmp_path / "run"

    def stored(step: int) -> list[str]:
        rows = httpx.get(f"{sidecar.url}/api/runs/{RUN}/samples", params={"step": step, "limit": 1000}, timeout=10)
        return sorted(r["completion"] for r in rows.json()) if rows.status_code == 200 else []

    first = _train(sidecar.url, out)
    try:  # killed during step 5, once the sidecar holds step 4: the checkpoint it resumes from is step 4's start
        wait_for(lambda: stored(4) or first.poll() is not None, "step 4 stored", timeout=180)
        assert first.poll() is None, first.stderr.read()[-2000:]
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    killed = {step: stored(step) for step in range(8)}
    resumed = _train(sidecar.url, out, "seed=1", resume=True)  # another seed: its completions differ
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()[-2000:]

    spill = SpillReader(out)
    again = []
    for step in range(8):
        rows = [r for r in spill.samples(step) if r.get("run_id") == RUN]
        newest = max(r[ATTEMPT_ATTR] for r in rows)
        mine = sorted(r["completion"] for r in rows if r[ATTEMPT_ATTR] == newest)
        wait_for(lambda: stored(step) == mine, f"step {step}: the newest attempt's completions", timeout=60)
        if len({r[ATTEMPT_ATTR] for r in rows}) > 1:
            again.append(step)
            assert killed[step] and killed[step] != mine  # the killed attempt's had been stored, and differed
    assert again and min(again) <= 4, again  # steps from the checkpoint on ran twice
    lines = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    last = {line["step"]: line for line in lines}  # each step's newest line
    scalars = {row["step"]: row for row in httpx.get(f"{sidecar.url}/api/runs/{RUN}/steps", timeout=10).json()}
    for step in again:
        assert scalars[step]["grpo.kl"] == pytest.approx(last[step]["kl"], rel=1e-6)
