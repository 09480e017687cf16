"""Training-thread CPU of `instrument`'s own code in a TRL GRPOTrainer step: hooks and logged-step flush, A/B.

    python benchmarks/trl_hooks_flush.py [--trees A,B] [--rounds R] [--steps N] [--logging-steps L] [--profile]

Each round runs, per tree (`--trees`: source trees of otel_grpo, default this one), one fresh
process that trains one instrumented tiny GRPOTrainer (benchmarks/trl.py's tiny preset:
8 completions of <= 8 tokens, num_iterations 2, beta 0.04; in-memory exporters, thread sink)
and measures the training thread's CPU time (`time.thread_time`) inside our code only:
every wrapped TRL method's time less the time of the TRL method it wraps (what the hook
itself adds) and the callback's step events (hooks), and the logged-step callback (`on_log`:
merge, reduce, hand-over: flush). The
trees alternate within a round and the first one alternates across rounds, so an A/B
shares the machine's state. Printed: per tree, the median over rounds (and range) of
the per-step mean after a warm-up of 2 logged steps: hooks, flush, total.

`--profile`: one run of this tree in this process, with cProfile (training-thread CPU) over the
flushes after the warm-up, printed to stderr by cumulative time.

This is narrower than benchmarks/trl.py (no peers, no paired wall time, no background
threads): it isolates the CPU that the stats path costs the trainer thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/trl.py would shadow the `trl` package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def measure(steps: int, logging_steps: int, profile: bool = False) -> dict[str, float]:
    """One run in this process (the tree on sys.path): per-step ms of hook and flush CPU."""
    sys.path.insert(0, str(ROOT / "tests" / "_support"))
    sys.path.insert(0, str(ROOT / "tests" / "integrations"))
    import torch
    from tiny_trl import make_grpo_trainer
    from trl_run import in_memory_telemetry

    from otel_grpo.integrations import instrument
    from otel_grpo.integrations.trl import _callback, _capture

    torch.set_num_threads(1)
    spent = {"hooks": 0.0, "flush": 0.0}
    per_hook: dict[str, list[float]] = {}  # wrapped method -> [own CPU s, calls], the whole run

    wrap = _capture.Capture._wrap

    def timed_wrap(self, name, hook):  # hook's own time = its total less the TRL method's inside it
        inside = [0.0]

        def inner(original):
            def call(*args, **kwargs):
                t0 = time.thread_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    inside[0] += time.thread_time() - t0
            return call

        def outer(original, *args, **kwargs):
            t0, before = time.thread_time(), inside[0]
            try:
                return hook(inner(original), *args, **kwargs)
            finally:
                own = time.thread_time() - t0 - (inside[0] - before)
                spent["hooks"] += own
                mine = per_hook.setdefault(name, [0.0, 0])
                mine[0] += own
                mine[1] += 1
        wrap(self, name, outer)

    _capture.Capture._wrap = timed_wrap
    on_log = _callback.InstrumentedCallback.on_log

    import cProfile
    profiler = cProfile.Profile(time.thread_time) if profile else None

    def timed_log(self, *args, **kwargs):
        t0 = time.thread_time()
        if profiler is not None and "start" in marks:
            profiler.enable()
        try:
            return on_log(self, *args, **kwargs)
        finally:
            if profiler is not None:
                profiler.disable()
            spent["flush"] += time.thread_time() - t0
    _callback.InstrumentedCallback.on_log = timed_log

    def timed_event(event):  # the step events (the optimizer step's phases): hook CPU as well
        method = getattr(_callback.InstrumentedCallback, event)

        def call(self, *args, **kwargs):
            t0 = time.thread_time()
            try:
                return method(self, *args, **kwargs)
            finally:
                own = time.thread_time() - t0
                spent["hooks"] += own
                mine = per_hook.setdefault(event, [0.0, 0])
                mine[0] += own
                mine[1] += 1
        setattr(_callback.InstrumentedCallback, event, call)

    for event in ("on_step_begin", "on_step_end"):
        timed_event(event)

    warm = 2 * logging_steps
    marks = {}

    from transformers import TrainerCallback

    class Mark(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == warm:
                marks["start"] = dict(spent)

    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_grpo_trainer(Path(tmp) / "run", callbacks=[Mark()], max_steps=steps,
                                    logging_steps=logging_steps, per_device_train_batch_size=8, num_generations=4,
                                    max_completion_length=8, num_iterations=2, beta=0.04, log_completions=False)
        tel, _, _ = in_memory_telemetry(Path(tmp) / "tel")
        instrument(trainer, telemetry=tel)
        trainer.train()
        tel.shutdown()
    if profiler is not None:  # where the flush's time goes, to stderr
        import pstats
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    n = steps - warm
    out = {k: 1e3 * (spent[k] - marks["start"][k]) / n for k in spent}
    out["total"] = out["hooks"] + out["flush"]
    if profile:  # each hook's own CPU per call (the whole run, warm-up included), to stderr
        for name, (seconds, calls) in sorted(per_hook.items(), key=lambda kv: -kv[1][0]):
            print(f"hook {name}: {calls} calls, {1e6 * seconds / calls:.1f} us/call, "
                  f"{1e3 * seconds / steps:.3f} ms/step", file=sys.stderr)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trees", default=str(ROOT))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=42)
    p.add_argument("--logging-steps", type=int, default=1)
    p.add_argument("--child", action="store_true")
    p.add_argument("--profile", action="store_true", help="one run of this tree: cProfile of the flush to stderr")
    a = p.parse_args()
    if a.child or a.profile:
        print(json.dumps(measure(a.steps, a.logging_steps, a.profile)))
        return
    trees = a.trees.split(",")
    results: dict[str, list[dict]] = {t: [] for t in trees}
    for r in range(a.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        for tree in order:
            env = {**os.environ, "PYTHONPATH": tree}
            cmd = [sys.executable, __file__, "--child", "--steps", str(a.steps),
                   "--logging-steps", str(a.logging_steps)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            results[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for tree, runs in results.items():
        cells = []
        for k in ("hooks", "flush", "total"):
            xs = [x[k] for x in runs]
            cells.append(f"{k} {statistics.median(xs):.3f} ({min(xs):.3f} .. {max(xs):.3f})")
        print(f"{tree}: L={a.logging_steps}, ms/step, median (range) of {len(runs)} rounds: " + "; ".join(cells))


if __name__ == "__main__":
    main()
