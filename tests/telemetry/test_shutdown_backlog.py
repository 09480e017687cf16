"""A loop that logs steps far faster than they are emitted (a backfill of an old run's history) and finishes:
what the emitter had not reached when shutdown's time ran out was neither exported nor spilled, and the user was
told only that the queue did not drain. The loss is said with its count and steps, and every step is either in
the spill or in that count."""

from __future__ import annotations

import logging
import re

import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings

STEPS = 50_000  # at tens of microseconds a step, the emitter is seconds behind when the loop ends, given 0.1 s


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_steps_lost_at_shutdown_are_counted_and_named(tmp_path, caplog, capfd, emit_in):
    caplog.set_level(logging.WARNING, logger="otel_grpo.telemetry")
    settings = TelemetrySettings(run_id="backfill", output_dir=tmp_path, metrics_exporters=["none"],
                                 traces_exporters=["none"], shutdown_timeout_s=0.2, emit_in=emit_in)
    with Telemetry(settings) as tel:
        for step in range(STEPS):
            tel.log_metrics(step, {"kl": 0.01, "reward": 0.5})
    spilled = {int(m) for m in re.findall(r'"step": (\d+)', (tmp_path / "steps.jsonl").read_text())}
    # Said where the steps were dropped: in this process, or in the telemetry process (its stderr, the same
    # terminal) when it answered in time; this process takes over, and says it, only when it did not.
    child = [line for line in capfd.readouterr().err.splitlines() if line.startswith("otel-grpo:")]
    messages = [r.getMessage() for r in caplog.records] + child
    said = [m for m in messages if "neither exported nor spilled" in m]
    assert len(said) == 1, messages
    lost = int(re.search(r"(\d+) queued step records", said[0]).group(1))
    assert lost > 0 and "raise shutdown_timeout_s" in said[0]
    assert len(spilled) + lost >= STEPS  # every step accounted for (a taken-over record may be spilled twice)
    if emit_in == "thread":  # records of this process name their steps: the ones the spill lacks
        first, last = map(int, re.search(r"steps (\d+) to (\d+)", said[0]).groups())
        assert set(range(STEPS)) - spilled == set(range(first, last + 1)) and last == STEPS - 1
