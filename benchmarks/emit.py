"""Training-thread cost of telemetry per step: otel-grpo vs TensorBoard's SummaryWriter, same process.

    .venv/bin/python benchmarks/emit.py [--steps 200] [--gpu-ms 30]

Each step logs ~150 scalars, four per-sample histograms over 512 completions and
16 sample records (chosen from 512 rows) through
  - otel-grpo: `Telemetry` exporting metrics and spans over OTLP/HTTP to a receiver
    process that accepts and discards (SDK background threads, 1 s metric interval);
  - TensorBoard: `add_scalar` per scalar, `add_histogram` per vector, `add_text` per
    sample (its event-file writer is also a background thread).
The loop sleeps `--gpu-ms` per step to stand in for the GPU work a real step waits
on; that is when background threads run. Timed: only the logging calls, on the
training thread (perf_counter). Also printed: CPU the rest of the process
(background threads) spent per step, since that work is moved, not removed.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import string
import tempfile
import time
from pathlib import Path

import numpy as np

from otel_grpo.catalog import SIGNALS, Kind
from otel_grpo.signals import ReducedStats
from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otlp_sink import start_sink

N_SCALARS, N_SAMPLES, N_EVENTS = 150, 512, 16




def make_step_data(rng: random.Random) -> tuple[ReducedStats, list[dict]]:
    keys = [s.key for s in SIGNALS if s.kind is Kind.GAUGE and s.label is None]
    keys += [f"reward_fn_mean/fn{i}" for i in range(4)]
    keys += [f"custom/metric_{i}" for i in range(N_SCALARS - len(keys))]
    values = {k: rng.random() for k in keys[:N_SCALARS]}
    samples = {
        "sample_reward": [rng.random() for _ in range(N_SAMPLES)],
        "sample_advantage": [rng.gauss(0, 1) for _ in range(N_SAMPLES)],
        "sample_completion_length": [float(rng.randint(1, 2048)) for _ in range(N_SAMPLES)],
        "sample_is_ratio": [rng.lognormvariate(0, 0.05) for _ in range(N_SAMPLES)],
    }
    text = "".join(rng.choices(string.ascii_letters + " ", k=600))
    rows = [
        {"prompt": text[:200], "completion": text, "reward": samples["sample_reward"][i],
         "rewards": {"format": 1.0, "accuracy": float(i % 2)}, "advantage": samples["sample_advantage"][i],
         "completion_length": int(samples["sample_completion_length"][i])}
        for i in range(N_SAMPLES)
    ]
    return ReducedStats(values, samples=samples), rows


def run_otel(data: list, gpu_s: float, out: Path, port: int) -> list[float]:
    settings = TelemetrySettings(
        run_id="bench", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{port}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], metric_export_interval_ms=1000,
        output_dir=out, top_k=6, bottom_k=5, random_k=5,
    )
    tel = Telemetry(settings)
    times = []
    for step, (stats, rows) in enumerate(data):
        t0 = time.perf_counter()
        with tel.step(step) as s:
            for phase in ("rollout", "reward", "update"):
                with s.phase(phase):
                    pass
            s.record(stats)
            s.samples(rows)
        times.append(time.perf_counter() - t0)
        time.sleep(gpu_s)
    tel.shutdown()
    return times


def run_tensorboard(data: list, gpu_s: float, out: Path) -> list[float]:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(out))
    times = []
    for step, (stats, rows) in enumerate(data):
        t0 = time.perf_counter()
        for key, value in stats.items():
            writer.add_scalar(key, value, step)
        for key, values in stats.samples.items():
            writer.add_histogram(key, np.asarray(values), step)
        for i, row in enumerate(sorted(rows, key=lambda r: r["reward"])[-N_EVENTS:]):
            writer.add_text(f"samples/{i}", f"**{row['reward']:.3f}** {row['prompt']}\n\n{row['completion']}", step)
        times.append(time.perf_counter() - t0)
        time.sleep(gpu_s)
    writer.close()
    return times


def measure(name: str, fn, *args) -> tuple[float, float]:
    cpu0, thread0 = time.process_time(), time.thread_time()
    times = fn(*args)[10:]  # first steps create instruments / files
    background = (time.process_time() - cpu0) - (time.thread_time() - thread0)
    med, p90 = statistics.median(times), statistics.quantiles(times, n=10)[-1]
    print(f"{name:12s} training thread: median {med * 1e3:7.3f} ms  p90 {p90 * 1e3:7.3f} ms   "
          f"background CPU {background / len(times) * 1e3:6.2f} ms/step")
    return med, background


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--gpu-ms", type=float, default=30.0, help="sleep per step standing in for GPU work")
    args = parser.parse_args()
    rng = random.Random(0)
    data = [make_step_data(rng) for _ in range(args.steps + 10)]
    sink, port = start_sink()
    print(f"{platform.node()} {platform.processor() or platform.machine()} python {platform.python_version()}, "
          f"{args.steps} steps, {N_SCALARS} scalars, 4x{N_SAMPLES} histogram values, {N_EVENTS} sample records")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            otel, _ = measure("otel-grpo", run_otel, data, args.gpu_ms / 1e3, Path(tmp) / "otel", port)
        finally:
            sink.terminate()
        tb, _ = measure("tensorboard", run_tensorboard, data, args.gpu_ms / 1e3, Path(tmp) / "tb")
    print(f"ratio tensorboard / otel-grpo (median): {tb / otel:.1f}x")


if __name__ == "__main__":
    main()
