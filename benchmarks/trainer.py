"""Steps per second of the demo preset with telemetry on vs off, interleaved in one run.

    .venv/bin/python benchmarks/trainer.py [--rounds N] [--steps N]

Telemetry on is the local-stack set-up: spans (step, phases, sample events) over
OTLP/HTTP to a live sidecar subprocess (`otel-grpo sidecar`), metrics on the
Prometheus pull endpoint, samples spilled to the run directory. Off is the same
trainer with no telemetry object at all. Each round trains a fresh demo model
from the same seed for `--steps` steps in both modes (on/off order alternating),
so both do identical work; the loop is timed around `train_step` calls, which
include telemetry's work on the training thread, while its emitter thread
competes for the same CPU. Flush and shutdown are timed separately. The demo's
minimum step duration is set to 0 here.
"""

from __future__ import annotations

import argparse
import os
import resource
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sidecar(tmp: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--port", str(port), "--db", str(tmp / "sidecar.db"),
         "--log-level", "warning"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=1).read()
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("sidecar did not come up")


def cpu_seconds() -> float:
    """CPU time of this process, every thread (the emitter's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(tmp: Path, name: str, steps: int, sidecar_port: int | None) -> tuple[float, float, float]:
    """(steps per second of the loop, CPU seconds per step, seconds of flush + shutdown) for one fresh demo run."""
    from otel_grpo.telemetry import Telemetry, TelemetrySettings
    from otel_grpo.trainer import GRPOTrainer, load_config

    out = tmp / name
    cfg = load_config(preset="demo", overrides=[f"output_dir={out}", f"run_id={name}", "progress=false",
                                                "min_step_seconds=0", "checkpoint_every=0",
                                                f"telemetry={'true' if sidecar_port else 'false'}"])
    tel = None
    if sidecar_port:
        tel = Telemetry(TelemetrySettings(
            run_id=name, output_dir=out, metrics_exporters=["prometheus"], prometheus_port=free_port(),
            traces_exporters=["otlp"], otlp_protocol="http/protobuf",
            otlp_traces_endpoint=f"http://127.0.0.1:{sidecar_port}/v1/traces"))
    trainer = GRPOTrainer(cfg, telemetry=tel)
    start, cpu = time.perf_counter(), cpu_seconds()
    for step in range(steps):
        trainer.train_step(step)
    loop, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    start = time.perf_counter()
    trainer.telemetry.shutdown()  # drains the emitter: its remaining CPU time is not in `cpu`
    return steps / loop, cpu / steps, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        sidecar, port = start_sidecar(tmp)
        try:
            on, off, shut, cpu_on, cpu_off = [], [], [], [], []
            one_run(tmp, "warmup", 3, None)  # imports, allocator, first-call costs
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                for telemetry in order:
                    sps, cpu, shutdown = one_run(tmp, f"r{r}-{'on' if telemetry else 'off'}", args.steps,
                                                 port if telemetry else None)
                    (on if telemetry else off).append(sps)
                    (cpu_on if telemetry else cpu_off).append(cpu)
                    if telemetry:
                        shut.append(shutdown)
                    print(f"round {r} telemetry={'on ' if telemetry else 'off'} {sps:6.2f} steps/s "
                          f"{1000 * cpu:7.1f} ms CPU/step", flush=True)
            runs = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5).read().decode()
        finally:
            sidecar.terminate()
            sidecar.wait(10)
    med_on, med_off = statistics.median(on), statistics.median(off)
    ratios = sorted(b / a for a, b in zip(on, off))  # per round: off / on, same round, same work
    print(f"\nmachine: {platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}")
    print(f"demo preset, {args.steps} steps x {args.rounds} rounds, interleaved")
    print(f"telemetry off: median {med_off:.2f} steps/s")
    print(f"telemetry on : median {med_on:.2f} steps/s (OTLP/HTTP spans to a live sidecar, Prometheus endpoint)")
    print(f"overhead     : {100 * (med_off / med_on - 1):+.1f}% (medians), per-round median "
          f"{100 * (statistics.median(ratios) - 1):+.1f}% [{100 * (ratios[0] - 1):+.1f}%, {100 * (ratios[-1] - 1):+.1f}%]")
    c_on, c_off = statistics.median(cpu_on), statistics.median(cpu_off)
    print(f"CPU per step : off {1000 * c_off:.1f} ms, on {1000 * c_on:.1f} ms ({100 * (c_on / c_off - 1):+.1f}%, all threads)")
    print(f"flush + shutdown with telemetry: median {statistics.median(shut):.3f} s")
    print(f"sidecar received runs: {runs.count('run_id')}")


if __name__ == "__main__":
    main()
