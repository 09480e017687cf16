"""Unit costs that design choices in the code rest on (the code's comments point here, not at figures).

    .venv/bin/python benchmarks/costs.py [--repeat N]

Each line is the median over `--repeat` rounds of the per-call time of one operation,
timed in a loop in this process; ratios compare operations timed side by side here.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_grpo.telemetry._bulk_histogram import HistogramRecorder
from otel_grpo.catalog import STEP_CHECKS, TRENDS, Streaks
from otel_grpo.telemetry._instruments import LatestValueGauge
from otel_grpo.telemetry._streaks import StepStreaks

ATTRS = {"run_id": "exp-42"}


def per_call(fn: Callable[[], object], calls: int, repeat: int) -> float:
    """Median over `repeat` rounds of the mean seconds per call of `fn`, `calls` calls a round."""
    fn()
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
    return statistics.median(rounds)


def thread_wakeups(rounds: int) -> list[tuple[str, float, str]]:
    """A thread waiting on an Event, woken and answering back `rounds` times: the waker's time for
    `set()` and the process CPU time per wake-up (two wake-ups a round)."""
    ping, pong, stop = threading.Event(), threading.Event(), False

    def waiter() -> None:
        while True:
            ping.wait()
            ping.clear()
            if stop:
                return
            pong.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    setting, cpu = [], time.process_time()
    for _ in range(rounds):
        start = time.perf_counter()
        ping.set()
        setting.append(time.perf_counter() - start)
        pong.wait()
        pong.clear()
    cpu = (time.process_time() - cpu) / (2 * rounds)
    stop = True
    ping.set()
    thread.join()
    return [("Event.set() that wakes a waiting thread (the waker's time)", statistics.median(setting), "us"),
            ("process CPU per thread wake-up (Event ping-pong)", cpu, "us")]


def exp_between_work(x: torch.Tensor, calls: int, repeat: int, gap_s: float = 0.5e-3) -> float:
    """Median over `repeat` rounds of the mean seconds of `x.exp()` when `gap_s` of other work (a spin in
    Python, as the stats pass does between its vector-math calls) separates the calls; the gap is not timed.
    The mean, not a typical call: the cost sits in the calls that wait for a parked thread."""
    x.exp()
    rounds = []
    for _ in range(repeat):
        spent = 0.0
        for _ in range(calls):
            start = time.perf_counter()
            x.exp()
            done = time.perf_counter()
            spent += done - start
            while time.perf_counter() - done < gap_s:
                pass
        rounds.append(spent / calls)
    return statistics.median(rounds)


def small_exp(repeat: int) -> list[tuple[str, float, str]]:
    """`exp` of a logged step's small float64 tensor with one intra-op thread and with every core's (torch's
    default), 0.5 ms of other work between calls, alone and while another process keeps a core busy: MKL's
    vector math starts its whole thread team for any size, and a team member parked between calls has to
    be woken, on a busy core after the other process's time slice (`signals.single_threaded`)."""
    import subprocess
    import sys

    x = torch.rand(80, 8, dtype=torch.float64)
    cores = os.cpu_count() or 1
    out = []
    for busy in (False, True):
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            for threads in (1, cores):
                torch.set_num_threads(threads)
                label = f"exp of a [80, 8] float64 tensor, {threads} intra-op thread{'s' * (threads > 1)}, work between"
                out.append((label + (", a process busy" if busy else ""), exp_between_work(x, 200, repeat), "us"))
        finally:
            torch.set_num_threads(1)
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    return out


def step_checks(meter, repeat: int) -> list[tuple[str, float, str]]:
    """One logged step's step checks on the emitter thread (the alerts' evidence), and the trend checks' share."""
    streaks = StepStreaks(meter, ATTRS, LatestValueGauge(meter, "g.streak", "{step}", ""), "1")
    rng = random.Random(1)
    scalars = {"kl": 0.02, "reward": 0.5, "entropy": 1.0, "tokens_per_second": 2000.0, "grad_norm": 1.0,
               "frac_reward_zero_std": 0.2, "clip_ratio_region_mean": 0.05, "completions_clipped_ratio": 0.05}

    def step() -> None:
        for key, value in scalars.items():
            streaks.observe(key, value * (1 + 0.1 * rng.random()))
        streaks.end_step()

    trends = [Streaks(STEP_CHECKS[name]) for name in TRENDS]

    def advance_trends() -> None:
        for state in trends:
            state.advance(1.0 + 0.1 * rng.random())

    for _ in range(100):  # full baselines
        step()
        advance_trends()
    return [(f"step checks of one logged step ({len(scalars)} scalars, {len(STEP_CHECKS)} checks)",
             per_call(step, 500, repeat), "us"),
            (f"(of which the {len(trends)} trend checks' baselines, `Streaks.advance`)",
             per_call(advance_trends, 500, repeat), "us")]



def store_write_bound(repeat: int) -> list[tuple[str, float, str]]:
    """What bounding SQLite's own lock adds to each write transaction (one PRAGMA), and what the check that the
    database file is still the one opened adds to each read and write (one `os.stat`), against the store's
    emptiest write transaction (both locks, the file check, BEGIN IMMEDIATE, COMMIT; no rows), on a real WAL
    file."""
    from otel_grpo.sidecar.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "costs.db")
        try:
            conn = store._writer

            def empty_write() -> None:
                with store._tx():
                    pass

            return [("PRAGMA busy_timeout on the store's writer", per_call(
                        lambda: conn.execute("PRAGMA busy_timeout = 5000"), 2000, repeat), "us"),
                    ("the database file's identity check (each read and write)",
                     per_call(store.health.file_problem, 2000, repeat), "us"),
                    ("the store's emptiest write transaction (locks, BEGIN IMMEDIATE, COMMIT)",
                     per_call(empty_write, 500, repeat), "us")]
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    r = args.repeat
    torch.set_num_threads(1)
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("costs")
    rows: list[tuple[str, float, str]] = []

    sync_gauge = meter.create_gauge("g.sync")
    ours_gauge = LatestValueGauge(meter, "g.ours", "{value}", "")
    rows.append(("SDK synchronous gauge set(), one value", per_call(lambda: sync_gauge.set(0.5, ATTRS), 2000, r), "us"))
    rows.append(("LatestValueGauge.set(), one value", per_call(lambda: ours_gauge.set(0.5, ATTRS), 2000, r), "us"))

    rng = random.Random(0)
    values = [rng.uniform(0, 1) for _ in range(256)]  # non-negative: the SDK's record drops the rest
    sdk_histogram = meter.create_histogram("h.sdk")
    bulk = HistogramRecorder(meter.create_histogram("h.bulk"))
    assert bulk.fast, "the batch histogram path fell back: see telemetry/_bulk_histogram.py"
    rows.append(("SDK Histogram.record, per value", per_call(
        lambda: [sdk_histogram.record(v, ATTRS) for v in values], 20, r) / len(values), "us"))
    rows.append(("HistogramRecorder.record_many, per value (256 a call)", per_call(
        lambda: bulk.record_many(values, ATTRS), 200, r) / len(values), "us"))

    tiny, step = torch.rand(64), torch.rand(64, 2048)
    rows.append(("torch op on a [64] CPU tensor (add)", per_call(lambda: torch.add(tiny, 1.0), 2000, r), "us"))
    rows.append(("torch slice + view of a flat buffer", per_call(lambda: step.view(-1)[:4096].view(2, 2048), 2000, r), "us"))
    rows.append(("torch op on a [64, 2048] CPU tensor (add)", per_call(lambda: torch.add(step, 1.0), 200, r), "us"))
    rows += small_exp(r)

    for n in (4096, 32768):
        xs = [rng.gauss(0, 1) for _ in range(n)]
        t = torch.tensor(xs, dtype=torch.float64)
        q = torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)
        rows.append((f"sorted() of {n} floats (host quantiles)", per_call(lambda: sorted(xs), 20, r), "ms"))
        rows.append((f"torch.nanquantile of {n} float64, 3 quantiles", per_call(lambda: torch.nanquantile(t, q), 20, r), "ms"))

    rows += step_checks(meter, r)
    rows += thread_wakeups(2000)
    rows += store_write_bound(r)

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "samples"
        rows.append(("Path.mkdir(parents=True, exist_ok=True) on an existing directory",
                     per_call(lambda: target.mkdir(parents=True, exist_ok=True), 2000, r), "us"))

    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"median of {r} rounds")
    for label, seconds, unit in rows:
        scale = 1e6 if unit == "us" else 1e3
        print(f"{label:<80} {seconds * scale:>9.2f} {unit}")


if __name__ == "__main__":
    main()
