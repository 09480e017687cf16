"""`otel-grpo follow` throughput and CPU: a 100k-step verl metrics file and 1M generation-dump rows.

    .venv/bin/python benchmarks/follow.py [--steps 100000] [--rows 1000000] [--rounds 3]
    .venv/bin/python benchmarks/follow.py --idle 10000      # idle CPU beside that many dumps, all done
    .venv/bin/python benchmarks/follow.py --backlog 100     # peak RSS reading 100 steps of 4 MB dumps

Files in verl 0.9.1's formats (the file logger's `{"step", "data"}` lines with the ~60
names a GRPO step logs, and `<step>.jsonl` dumps of 64 rows per step) are followed
from the start to their end (`Follower.run(drain=True)`, as `--finished` does), pinned
to one core. Traces go over OTLP/HTTP to a receiver process that accepts and discards
(as a collector would); metrics to a Prometheus reader (pulled, so nothing to push).
Per round: lines (or rows) per second of wall time, and the follower process's CPU
seconds (every thread: parsing, Telemetry's emitter, the span exporter) per line.
The peer in the same process: `json.loads` of every line, the floor any reader pays.

Keeping up with a large run: 10 steps/s, each a metrics line plus a 64-sample selection
(16 top, 16 bottom, 32 random) from its dump, needs < 100 ms of one core per step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

from otel_grpo.integrations.follow import Follower, FollowOptions, State, VerlMetrics, VerlRollouts
from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otlp_sink import start_sink

ROWS_PER_STEP = 64

NAMES = (
    ["training/global_step", "training/epoch"]
    + [f"critic/{k}/{s}" for k in ("score", "rewards", "advantages", "returns") for s in ("mean", "max", "min")]
    + [f"actor/{k}" for k in ("pg_loss", "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "entropy", "kl_loss", "kl_coef",
                              "grad_norm", "lr", "loss", "entropy_loss")]
    + [f"{f}/{s}" for f in ("response_length", "prompt_length") for s in ("mean", "max", "min", "clip_ratio")]
    + ["perf/throughput", "perf/total_num_tokens", "perf/time_per_step", "perf/mfu/actor", "perf/max_memory_allocated_gb"]
    + [f"rollout_corr/{k}" for k in ("kl", "k3_kl", "training_ppl", "rollout_ppl", "log_ppl_diff", "rollout_is_mean",
                                     "rollout_is_std", "rollout_is_min", "rollout_is_max", "rollout_is_eff_sample_size")]
    + [f"timing_s/{p}" for p in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "step")]
    + ["val-core/gsm8k/acc/mean@1", "response/aborted_ratio", "response_length_non_aborted/mean"]
)


def write_files(d: Path, steps: int, rows: int) -> tuple[Path, Path]:
    metrics, dumps = d / "exp.jsonl", d / "rollouts"
    dumps.mkdir()
    with open(metrics, "w") as fp:
        for step in range(1, steps + 1):
            data = {n: (step if n == "training/global_step" else 0.001 * (step % 997) + i) for i, n in enumerate(NAMES)}
            fp.write(json.dumps({"step": step, "data": data}, separators=(",", ":")) + "\n")
    text = "x" * 400  # a few hundred characters of prompt and completion, as a math task's
    for step in range(1, rows // ROWS_PER_STEP + 1):
        with open(dumps / f"{step}.jsonl", "w") as fp:
            for i in range(ROWS_PER_STEP):
                fp.write(json.dumps({"input": f"q{step}.{i} {text}", "output": f"a{i} {text}", "gts": str(i),
                                     "score": (i % 5) / 4, "step": step, "acc": float(i % 2)}) + "\n")
    return metrics, dumps


def follow_once(sources, port: int, d: Path) -> tuple[float, float, int]:
    settings = TelemetrySettings(run_id=f"bench-{time.time_ns()}", output_dir=str(d / "out"), spill_samples=False,
                                 metrics_exporters=["prometheus"], prometheus_port=0, traces_exporters=["otlp"],
                                 otlp_traces_endpoint=f"http://127.0.0.1:{port}/v1/traces",
                                 otlp_protocol="http/protobuf", top_k=16, bottom_k=16, random_k=32)
    tel = Telemetry(settings)
    follower = Follower(tel, sources, State(d / f"state-{time.time_ns()}.json"), FollowOptions(pair_wait_s=0.0),
                        from_start=True)
    wall, cpu = time.perf_counter(), time.process_time()
    follower.run(threading.Event(), drain=True)
    tel.shutdown()  # includes exporting the last spans: their CPU is counted
    return time.perf_counter() - wall, time.process_time() - cpu, follower.emitted


def parse_only(paths: list[Path]) -> tuple[float, int]:
    wall, n = time.perf_counter(), 0
    for path in paths:
        with open(path, "rb") as fp:
            for line in fp:
                json.loads(line)
                n += 1
    return time.perf_counter() - wall, n


def idle_cpu(files: int, seconds: float) -> None:
    """CPU share of one core while following `files` dumps that are all done and a quiet directory."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        dumps = d / "rollouts"
        dumps.mkdir()
        for step in range(1, files + 1):
            (dumps / f"{step}.jsonl").write_text(json.dumps({"input": "q", "output": "a", "score": 1.0}) + "\n")
        old = time.time_ns() - 3600 * 10**9  # written an hour ago: the directory is quiet
        os.utime(dumps, ns=(old, old))
        settings = TelemetrySettings(run_id="idle", output_dir=str(d / "out"), spill_samples=False,
                                     metrics_exporters=["none"], traces_exporters=["none"])
        tel = Telemetry(settings)
        follower = Follower(tel, [VerlRollouts(dumps, settle_s=0.0)], State(d / "state.json"), from_start=True)
        stop = threading.Event()
        runner = threading.Thread(target=follower.run, args=(stop,))
        runner.start()
        while follower.emitted < files:  # the backlog first
            time.sleep(0.2)
        time.sleep(2.0)
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        share = (time.process_time() - cpu) / (time.perf_counter() - wall)
        stop.set()
        runner.join()
        tel.shutdown()
    print(f"idle with {files} dump files done: {share * 100:.2f} % of one core over {seconds:.0f} s (poll 0.5 s)")


def backlog_rss(steps: int, dump_mb: float = 4.0) -> None:
    """Peak RSS of this process reading `steps` dumps of `dump_mb` MB each from the start (`--finished`)."""
    import resource

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        dumps = d / "rollouts"
        dumps.mkdir()
        text = "x" * int(dump_mb * 1e6 / ROWS_PER_STEP)
        for step in range(1, steps + 1):
            with open(dumps / f"{step}.jsonl", "w") as fp:
                for i in range(ROWS_PER_STEP):
                    fp.write(json.dumps({"input": f"q{i}", "output": text, "score": i / 64, "step": step}) + "\n")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        settings = TelemetrySettings(run_id="backlog", output_dir=str(d / "out"), spill_samples=False,
                                     metrics_exporters=["none"], traces_exporters=["none"])
        tel = Telemetry(settings)
        follower = Follower(tel, [VerlRollouts(dumps, settle_s=0.0)], State(d / "state.json"), from_start=True)
        follower.run(threading.Event(), drain=True)
        tel.shutdown()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"backlog of {steps} dumps of {dump_mb:g} MB: peak RSS {peak:.0f} MB ({before:.0f} MB before reading)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle", type=int, metavar="FILES", help="measure idle CPU beside FILES done dumps, then exit")
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--backlog", type=int, metavar="STEPS", help="measure peak RSS over a 4 MB-dump backlog, then exit")
    args = ap.parse_args()
    if args.idle:
        return idle_cpu(args.idle, args.idle_s)
    if args.backlog:
        return backlog_rss(args.backlog)
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core; the sink runs elsewhere
    proc, port = start_sink()
    results: dict[str, list[tuple[float, float, int]]] = {"metrics": [], "rollouts": [], "parse": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            metrics, dumps = write_files(d, args.steps, args.rows)
            for _ in range(args.rounds):
                results["parse"].append((*parse_only([metrics]), 0))
                results["metrics"].append(follow_once([VerlMetrics(metrics)], port, d))
                results["rollouts"].append(follow_once([VerlRollouts(dumps, settle_s=0.0)], port, d))
    finally:
        proc.terminate()
    report(args, results)


def report(args, results) -> None:
    med = statistics.median
    n_dumps = args.rows // ROWS_PER_STEP
    m_wall = med(w for w, _, _ in results["metrics"])
    m_cpu = med(c for _, c, _ in results["metrics"])
    r_wall = med(w for w, _, _ in results["rollouts"])
    r_cpu = med(c for _, c, _ in results["rollouts"])
    p_wall = med(w for w, _, _ in results["parse"])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"one core; {args.rounds} rounds, medians")
    print(f"metrics file: {args.steps} lines: {args.steps / m_wall:,.0f} lines/s wall, "
          f"{m_cpu / args.steps * 1e3:.3f} ms CPU per line ({m_cpu:.1f} s CPU); json.loads alone {args.steps / p_wall:,.0f} "
          f"lines/s (follower/parse-only throughput {p_wall / m_wall:.3f})")
    print(f"rollout dumps: {args.rows} rows in {n_dumps} files: {args.rows / r_wall:,.0f} rows/s wall, "
          f"{r_cpu / n_dumps * 1e3:.2f} ms CPU per 64-row step ({r_cpu:.1f} s CPU)")
    per_step = m_cpu / args.steps + r_cpu / n_dumps
    print(f"one step (metrics line + 64-row dump, 64 kept): {per_step * 1e3:.2f} ms CPU -> {1 / per_step:,.1f} steps/s "
          f"on one core (target 10: {'met' if per_step < 0.1 else 'NOT met'})")
    for name in ("metrics", "rollouts"):
        print(f"  rounds {name}: " + ", ".join(f"{w:.2f}s wall/{c:.2f}s cpu" for w, c, _ in results[name]))


if __name__ == "__main__":
    main()
