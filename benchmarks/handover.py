"""Training-thread time of handing a logged step to the telemetry child (`emit_in="process"`), two trees alternating.

    .venv/bin/python benchmarks/handover.py --before DIR [--rounds 3] [--steps 20] [--gaps 0.1,1.0]

DIR holds the code to compare with (`git archive <rev> | tar -x -C DIR`). Each round runs one
fresh process per tree (the order alternates). In it a loop logs `--steps` steps per gap of
`--gaps` seconds between logged steps (0.1 s: every step of a TRL step logged; 1.0 s: TRL's
logging_steps=10), each step a record as benchmarks/emit.py builds it (150 scalars, four
histograms over 512 values, 16 of 512 sample rows kept) with exporters off and the samples
spilled. After each logged step the loop does the training's next work: `WORK_OPS` small torch
ops, each releasing the GIL as a training step's do. Timed on the training thread:
  - submit: `ProcessSink.submit` itself (perf_counter and thread CPU);
  - after: the work that follows, minus the same work timed in the same step before it (the
    GIL and the core taken by whatever the hand-over woke: the time a wake-up really costs);
  - background: CPU of this process's other threads (the sink's sender and reader) per step.
Figures: medians over steps per round; the table gives the median and range over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK_OPS = 200


def one_process(steps: int, gaps: list[float]) -> dict[str, float]:
    import torch

    from emit import make_step_data
    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    torch.set_num_threads(1)
    x = torch.rand(80, 8)

    def work() -> float:
        t0 = time.perf_counter()
        for _ in range(WORK_OPS):
            x.mul_(1.0)
        return time.perf_counter() - t0

    rng = random.Random(0)
    data = [make_step_data(rng) for _ in range(4)]
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tel = Telemetry(TelemetrySettings(run_id="handover", output_dir=Path(tmp), emit_in="process",
                                          metrics_exporters=["none"], traces_exporters=["none"],
                                          top_k=6, bottom_k=5, random_k=5))
        sink = tel._sink
        submit, timed = sink.submit, []

        def timed_submit(record) -> None:
            t0, c0 = time.perf_counter(), time.thread_time()
            submit(record)
            timed.append((time.perf_counter() - t0, time.thread_time() - c0))

        sink.submit = timed_submit
        step = 0
        for gap in gaps:
            timed.clear()
            after, others = [], []
            for i in range(steps + 2):  # the first two warm up
                time.sleep(gap / 2)
                before = work()
                time.sleep(gap / 2)
                p0, t0 = time.process_time(), time.thread_time()
                stats, rows = data[i % len(data)]
                with tel.step(step) as s:
                    s.record(stats)
                    s.samples(rows)
                following = work()
                if i >= 2:
                    after.append(following - before)
                    others.append((time.process_time() - p0) - (time.thread_time() - t0))
                step += 1
            key = f"{gap:g}s"
            out |= {f"submit_{key}": statistics.median(t for t, _ in timed[2:]) * 1e3,
                    f"submit_cpu_{key}": statistics.median(c for _, c in timed[2:]) * 1e3,
                    f"after_{key}": statistics.median(after) * 1e3,
                    f"background_{key}": statistics.fmean(others) * 1e3}
        tel.finish()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="a tree with the code to compare with")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--gaps", default="0.1,1.0")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one process's figures
    a = p.parse_args()
    gaps = [float(g) for g in a.gaps.split(",")]
    if a.one:
        print("RESULT " + json.dumps(one_process(a.steps, gaps)), flush=True)
        return
    trees = {"after": Path(__file__).resolve().parents[1], "before": a.before.resolve()}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(a.rounds):
        for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(trees[name]), str(Path(__file__).parent)])}
            cmd = [sys.executable, __file__, "--before", str(a.before), "--steps", str(a.steps), "--gaps", a.gaps,
                   "--one"]
            run = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            results[name].append(json.loads(run.stdout.rsplit("RESULT ", 1)[1]))
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[name][-1].items()),
                  flush=True)
    print(f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
          f"{a.rounds} rounds x {a.steps} steps per gap; load {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; ms per logged step, median (range over rounds)")
    for key in results["after"][0]:
        cells = []
        for name in ("before", "after"):
            v = [r[key] for r in results[name]]
            cells.append(f"{name} {statistics.median(v):.3f} ({min(v):.3f} .. {max(v):.3f})")
        print(f"{key:20s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
