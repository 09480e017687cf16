"""Steps per second of the demo preset with telemetry on vs off, interleaved in one run.

    .venv/bin/python benchmarks/trainer.py [--rounds N] [--steps N] [--paired-steps N]

Telemetry on is the local-stack set-up: spans (step, phases, sample events) over
OTLP/HTTP to a live sidecar subprocess (`otel-grpo sidecar`), metrics on the
Prometheus pull endpoint, samples spilled to the run directory. Off is the same
trainer with no telemetry object at all. Each round trains a fresh demo model
from the same seed for `--steps` steps in both modes (on/off order alternating),
so both do identical work; the loop is timed around `train_step` calls, which
include telemetry's work on the training thread, while its emitter thread
competes for the same CPU. Flush and shutdown are timed separately. The demo's
minimum step duration is set to 0 here.

Run-level figures on a shared 2-core machine drift by more than the 2% target
between runs, so the first figure is step-paired: two trainers built from the same
seed (identical batches), one with telemetry and one without, take turns step by
step, and each telemetry step is timed together with draining its emitter thread,
i.e. with all of telemetry's in-process work serialized onto the step: an upper
bound on what the background thread can cost. The per-step ratio on/off is immune
to drift slower than one step.
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
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

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


def demo_trainer(tmp: Path, name: str, sidecar_port: int | None) -> Any:
    """A fresh demo trainer (same seed every time), with local-stack telemetry when `sidecar_port` is given."""
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
    return GRPOTrainer(cfg, telemetry=tel)


def paired_steps(tmp: Path, steps: int, sidecar_port: int) -> tuple[list[float], list[float]]:
    """Per-step seconds (on incl. draining its emitter, off) of two same-seed trainers taking turns."""
    on, off = demo_trainer(tmp, "paired-on", sidecar_port), demo_trainer(tmp, "paired-off", None)
    drain = on.telemetry._sink.drain  # private on purpose: the sink's work timed into the step
    t_on, t_off = [], []
    for step in range(steps):
        rewards = []
        for trainer, times in ((on, t_on), (off, t_off)) if step % 2 == 0 else ((off, t_off), (on, t_on)):
            start = time.perf_counter()
            rewards.append(trainer.train_step(step)["reward"])
            if trainer is on:
                drain(None)
            times.append(time.perf_counter() - start)
        if rewards[0] != rewards[1]:
            raise RuntimeError(f"step {step}: the paired trainers diverged ({rewards}); the pairing compares unlike work")
    on.telemetry.shutdown()
    return t_on, t_off


def background_cpu_seconds() -> float:
    """CPU time of every thread but the main one (telemetry's emitter and exporters); Linux /proc."""
    main, total = threading.main_thread().native_id, 0
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) != main:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def one_run(tmp: Path, name: str, steps: int, sidecar_port: int | None) -> tuple[float, float, float, float]:
    """(steps/s of the loop, CPU s per step, background-thread CPU s per step, s of flush + shutdown), one fresh run."""
    trainer = demo_trainer(tmp, name, sidecar_port)
    start, cpu, background = time.perf_counter(), cpu_seconds(), background_cpu_seconds()
    for step in range(steps):
        trainer.train_step(step)
    loop, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    background = background_cpu_seconds() - background  # before shutdown: its threads are still there
    start = time.perf_counter()
    trainer.telemetry.shutdown()  # drains the emitter: its remaining CPU time is not in `cpu`
    return steps / loop, cpu / steps, background / steps, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, choices=range(1, 100), metavar="N")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--paired-steps", type=int, default=80)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        sidecar, port = start_sidecar(tmp)
        try:
            on, off, shut, cpu_on, cpu_off, background = [], [], [], [], [], []
            one_run(tmp, "warmup", 3, None)  # imports, allocator, first-call costs
            p_on, p_off = paired_steps(tmp, args.paired_steps, port)
            skip = min(5, args.paired_steps // 4)  # first steps: first-call costs of each trainer
            step_ratios = sorted(a / b for a, b in zip(p_on[skip:], p_off[skip:]))
            print(f"paired steps: median on {1000 * statistics.median(p_on[skip:]):.1f} ms, off "
                  f"{1000 * statistics.median(p_off[skip:]):.1f} ms", flush=True)
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                for telemetry in order:
                    sps, cpu, bg, shutdown = one_run(tmp, f"r{r}-{'on' if telemetry else 'off'}", args.steps,
                                                 port if telemetry else None)
                    (on if telemetry else off).append(sps)
                    (cpu_on if telemetry else cpu_off).append(cpu)
                    if telemetry:
                        shut.append(shutdown)
                        background.append(bg)
                    print(f"round {r} telemetry={'on ' if telemetry else 'off'} {sps:6.2f} steps/s "
                          f"{1000 * cpu:7.1f} ms CPU/step", flush=True)
            runs = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5).read().decode()
        finally:
            sidecar.terminate()
            sidecar.wait(10)
    med_on, med_off = statistics.median(on), statistics.median(off)
    ratios = sorted(b / a for a, b in zip(on, off))  # per round: off / on, same round, same work
    print(f"\nmachine: {platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}")
    q = statistics.quantiles(step_ratios, n=4)
    print(f"step-paired, {len(step_ratios)} steps, telemetry steps incl. draining the emitter (upper bound):")
    print(f"  overhead   : median {100 * (statistics.median(step_ratios) - 1):+.2f}% per step "
          f"[quartiles {100 * (q[0] - 1):+.1f}%, {100 * (q[2] - 1):+.1f}%]")
    print(f"demo preset, {args.steps} steps x {args.rounds} rounds, interleaved")
    print(f"telemetry off: median {med_off:.2f} steps/s")
    print(f"telemetry on : median {med_on:.2f} steps/s (OTLP/HTTP spans to a live sidecar, Prometheus endpoint)")
    print(f"overhead     : {100 * (med_off / med_on - 1):+.1f}% (medians), per-round median "
          f"{100 * (statistics.median(ratios) - 1):+.1f}% [{100 * (ratios[0] - 1):+.1f}%, {100 * (ratios[-1] - 1):+.1f}%]")
    c_on, c_off = statistics.median(cpu_on), statistics.median(cpu_off)
    print(f"CPU per step : off {1000 * c_off:.1f} ms, on {1000 * c_on:.1f} ms ({100 * (c_on / c_off - 1):+.1f}%, all threads)")
    bg = statistics.median(background)
    print(f"telemetry's background threads: median {1000 * bg:.2f} ms CPU/step "
          f"({100 * bg / c_off:.2f}% of the CPU of a step without telemetry)")
    print(f"flush + shutdown with telemetry: median {statistics.median(shut):.3f} s")
    print(f"sidecar received runs: {runs.count('run_id')}")


if __name__ == "__main__":
    main()
