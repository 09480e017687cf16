"""The trainer's own disk fails under the spill while the collector is down too: a spill directory that
cannot be made (a read-only root file system, an unwritable HOME) and a disk that fills up mid-run. Training
goes on; the user is told once that the spill fails and whether that loses data, the export warning no longer
claims the spill keeps the samples, and the run's end says how many steps and rows were not spilled.

Both failures are the kernel's own, without root: a directory under a regular file cannot be made, and
`/dev/full` answers every write with ENOSPC."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.telemetry._spill import SampleSpill

from tests._support.waiting import wait_for
from .conftest import free_port

STEPS, ROWS = 12, 8
NO_WAIT_S = 5.0
"""A step's seconds at most: under the exporters' 10-s timeout, which a step that waited on the endpoint takes."""


def _run(out: Path, emit_in: str, full_from: int | None = None) -> float:
    """A run of STEPS steps against a closed port; from step `full_from` on, every spill write meets a full
    disk. Returns the slowest step's seconds."""
    settings = TelemetrySettings(
        run_id="disk", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{free_port()}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=out, top_k=ROWS, bottom_k=0,
        random_k=0, shutdown_timeout_s=2, emit_in=emit_in,
    )
    tel = Telemetry(settings)
    slowest = 0.0
    for step in range(STEPS):
        if step == full_from:
            wait_for(lambda: _lines(out / "steps.jsonl") == step, "the earlier steps spilled")
            (out / "steps.jsonl").unlink()
            (out / "steps.jsonl").symlink_to("/dev/full")
            for later in range(step, STEPS):
                (out / "samples" / f"step_{later}.jsonl").symlink_to("/dev/full")
        started = time.monotonic()
        with tel.step(step) as s:
            s.record({"kl": 0.01, "reward": 0.5})
            s.samples([{"prompt": f"{step}-{i}", "completion": "c", "reward": i / ROWS} for i in range(ROWS)])
        slowest = max(slowest, time.monotonic() - started)
    tel.finish()
    return slowest


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _said(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> list[str]:
    """What the user was told at warning level: this process's records and the telemetry child's stderr."""
    ours = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    child = [line for line in capfd.readouterr().err.splitlines() if line.startswith("otel-grpo:")]
    return ours + child


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_spill_directory_that_cannot_be_made_says_so_and_what_was_lost(tmp_path, emit_in, caplog, capfd):
    (tmp_path / "readonly").write_text("")  # a file where the run's directory would be made
    out = tmp_path / "readonly" / "run"
    caplog.set_level(logging.WARNING, logger="otel_grpo.telemetry")

    # never waits on the disk nor the endpoint: a wait on the export would take its 10-s timeout; the bound
    # leaves a loaded machine's slowest step (a process mode's first hand-over) room
    assert _run(out, emit_in) < NO_WAIT_S

    said = _said(caplog, capfd)
    spill = [m for m in said if m.startswith("otel-grpo: spilling to")]
    assert len(spill) == 1 and str(out) in spill[0] and "NotADirectoryError" in spill[0], said
    export = [m for m in said if "otel-grpo: exporting" in m]
    assert len(export) == 1 and "samples stay in the local spill" not in export[0], said
    assert f"the local spill to {out} failed too" in export[0]
    lost = [m for m in said if "of this run were not spilled" in m]
    assert len(lost) == 1 and f"{STEPS} steps and {STEPS * ROWS} sample rows" in lost[0], said
    assert "is lost" in lost[0]
    assert len(said) == 3, said  # nothing else: no traceback, no line per step


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_disk_that_fills_up_mid_run_keeps_what_came_before_and_counts_the_rest(tmp_path, emit_in, caplog, capfd):
    caplog.set_level(logging.WARNING, logger="otel_grpo.telemetry")

    assert _run(tmp_path, emit_in, full_from=5) < NO_WAIT_S

    said = _said(caplog, capfd)
    spill = [m for m in said if m.startswith("otel-grpo: spilling to")]
    assert len(spill) == 1 and "No space left on device" in spill[0], said
    lost = [m for m in said if "of this run were not spilled" in m]
    assert len(lost) == 1 and f"{STEPS - 5} steps and {(STEPS - 5) * ROWS} sample rows" in lost[0], said
    assert "is lost" in lost[0]
    kept = sorted(int(re.fullmatch(r"step_(\d+)\.jsonl", p.name).group(1))
                  for p in (tmp_path / "samples").iterdir() if not p.is_symlink())
    assert kept == list(range(5))
    assert all(len(p.read_text().splitlines()) == ROWS for p in (tmp_path / "samples").iterdir()
               if not p.is_symlink())
    assert os.readlink(tmp_path / "steps.jsonl") == "/dev/full"


def test_a_nearly_full_disk_that_takes_step_lines_and_refuses_samples_is_said_once(tmp_path, caplog):
    """A full disk may still take a small step line into a file's last page, then refuse the step's samples:
    the spill fails and works by turns every step, and says so once each way, counting the rest."""
    spill = SampleSpill(tmp_path)
    (tmp_path / "samples").mkdir()
    for step in range(50):
        (tmp_path / "samples" / f"step_{step}.jsonl").symlink_to("/dev/full")
    caplog.set_level(logging.INFO, logger="otel_grpo.telemetry")
    for step in range(50):
        spill.write_step("disk", step, 1, 2, {"kl": 0.1}, {})
        spill.write(step, [{"run_id": "disk", "step": step, "sample_index": 0}])
    spill.report(exported=True)

    said = [r for r in caplog.records]
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO, logging.INFO], [r.getMessage() for r in said]
    assert "works again" in said[1].getMessage()
    assert "0 steps and 50 sample rows" in said[2].getMessage() and "every export succeeded" in said[2].getMessage()
    assert _lines(spill.steps_path) == 50


def test_a_spill_failure_without_an_otlp_traces_exporter_says_the_samples_are_lost(tmp_path, caplog):
    """With traces going nowhere (`none`, `console`), no exporter sends what the spill could not keep: the first
    warning said "they still go to the exporters" all the same."""
    (tmp_path / "file").write_text("")
    settings = TelemetrySettings(run_id="nowhere", metrics_exporters=["none"], traces_exporters=["none"],
                                 output_dir=tmp_path / "file" / "run", emit_in="thread")
    caplog.set_level(logging.WARNING, logger="otel_grpo.telemetry")
    with Telemetry(settings) as tel:
        with tel.step(0) as s:
            s.record({"kl": 0.01, "reward": 0.5})
            s.samples([{"prompt": "p", "completion": "c", "reward": 0.5}])
    (spill,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("otel-grpo: spilling to")]
    assert "no OTLP traces exporter sends them: these steps and samples are lost" in spill, spill
    assert "still go to the exporters" not in spill
