"""`OTEL_SDK_DISABLED=true` (the OpenTelemetry switch, often set for a whole cluster) silences a run: it is
said once, at the start, and the run still spills its samples and ends without blaming any endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import free_port

_RUN = """
import logging, sys
logging.basicConfig(stream=sys.stderr, format="%(message)s")
from otel_grpo.telemetry import Telemetry, TelemetrySettings
s = TelemetrySettings(run_id="quiet-run", output_dir=sys.argv[1], emit_in=sys.argv[2], otlp_protocol="http/protobuf",
                      otlp_endpoint="http://127.0.0.1:" + sys.argv[3], metrics_exporters=["otlp"],
                      traces_exporters=["otlp"])
tel = Telemetry(s)
for step in range(3):
    with tel.step(step) as st:
        st.record({"kl": 0.1, "reward": 0.5})
        st.samples([{"prompt": f"p{i}", "completion": "c", "reward": i / 4} for i in range(4)])
tel.finish()
"""


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_a_disabled_sdk_is_said_once_and_the_spill_still_records(tmp_path, emit_in):
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    closed = str(free_port())  # nothing listens: with the SDK on, the run's one warning would blame it
    done = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path), emit_in, closed], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("otel-grpo")]
    assert len(said) == 1, done.stderr
    assert "OTEL_SDK_DISABLED=true" in said[0] and "'quiet-run'" in said[0]
    assert str(tmp_path / "samples") in said[0]
    for step in range(3):
        rows = [json.loads(line) for line in (tmp_path / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        assert {r["prompt"] for r in rows} == {f"p{i}" for i in range(4)}
