"""Training-thread time `instrument` adds to a TRL GRPOTrainer step, paired on and off in one run.

    python benchmarks/trl.py [--preset tiny|large] [--steps N] [--rounds R] [--threads N] [--logging-steps L]
                             [--design paired|separate]

Two GRPOTrainers built from the same seed and checkpoint (identical batches), one
instrumented as a user would (`instrument(trainer)` with the default exporters:
OTLP/HTTP spans and metrics, metrics pushed every 10 s, to a receiver process that
discards them; samples spilled) and one not, run in two threads that take turns
step by step: a callback hands the turn over at every `on_step_begin`, so exactly one
trains at a time and each step is timed from its begin to the next begin (log and
telemetry flush included). The instrumented run's emitter and exporters keep running
in the background, as in real use: in a child process by default (`instrument`'s
`emit_in="process"`; its CPU is reported apart), on threads of this process with
`--emit-in thread`. Each round runs in a fresh process (the trainer
built first alternates): one process's two trainers can differ by a few percent for
reasons of placement alone, so the figures are medians over rounds. Reported per step:
the median paired difference on - off of wall time and of the trainer thread's CPU
time, the time spent inside our hooks and the logged-step flush (perf_counter around
them: the direct figure), and the CPU time of the telemetry's threads in this process
(emitter, span processor and metric reader; or, emitting from a child, the pipe's sender and
receiver). That background work runs while the next steps run, those of the other trainer
included, so the paired figure undercounts it; a Python-bound loop waits for much of it
(the GIL): direct + background is the bound.

`--design separate` answers what the paired design cannot: every cost of the telemetry,
background threads and GIL waits included, charged to the run that has it. Each round
runs the two trainers in two fresh processes one after the other (the order alternates),
and each reports its mean step time over every step after a warm-up, logged steps and
the exporters' periodic batches included. The figure is the median over rounds of
on - off; it is noisier than the paired one (two processes, some seconds apart), so it
needs more rounds.

`--logging-steps` is TRL's: 1 (the default here) logs and flushes every step, the worst
case; TRL's own default is 10. The paired figures are then medians, over windows of L
steps (one logged step each), of each window's mean.

Targets (issue 11): <= 2 ms per step on the tiny CPU model; <= 2% on a model whose
step takes >= 1 s (`--preset large`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
# this file is named trl.py: its folder on sys.path would shadow the `trl` package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT / "tests" / "_support"))
sys.path.insert(0, str(ROOT))

PRESETS = {
    # the test fixture's model: ~0.1-0.3 s per step on CPU
    "tiny": {"model": {}, "config": {"per_device_train_batch_size": 8, "num_generations": 4,
                                     "max_completion_length": 8}},
    # a model whose step takes >= 1 s on a 2-core CPU
    "large": {"model": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
                        "num_attention_heads": 8, "num_key_value_heads": 8},
              "config": {"per_device_train_batch_size": 16, "num_generations": 8, "max_completion_length": 48}},
}


def save_model(directory: Path, overrides: dict) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import tiny_trl

    tok = tiny_trl.make_tokenizer()
    torch.manual_seed(0)
    base = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
                tie_word_embeddings=True)
    LlamaForCausalLM(LlamaConfig(**{**base, **overrides})).save_pretrained(directory)
    tok.save_pretrained(directory)
    return str(directory)


class Turns:
    """Two trainers alternate steps; each step is timed between its begin and the next one.

    The RNGs (torch, numpy, random) are global, so each trainer's RNG state is saved when it
    hands the turn over and restored when it gets it back: both sample the same completions.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.turn = "off"
        self.times: dict[str, list[float]] = {"off": [], "on": []}
        self.cpu: dict[str, list[float]] = {"off": [], "on": []}  # the trainer thread's CPU time per step
        self.trainers: set[int] = set()  # thread idents of the two trainers
        self.background: list[dict[int, float]] = []  # CPU of every other Python thread, at two points
        self.child: list[float] = []  # CPU of the telemetry process (emit_in="process"), at the same points
        self.child_pid: int | None = None
        self.rng: dict[str, tuple] = {}

    def restore(self, name: str) -> None:
        import random

        import numpy as np
        import torch
        from transformers import set_seed

        if name not in self.rng:
            set_seed(0)  # both trainers' first step starts from the same state
            return
        t, n, r = self.rng[name]
        torch.set_rng_state(t)
        np.random.set_state(n)
        random.setstate(r)

    def save(self, name: str) -> None:
        import random

        import numpy as np
        import torch

        self.rng[name] = (torch.get_rng_state(), np.random.get_state(), random.getstate())

    def callback(self, name: str):
        from transformers import TrainerCallback

        turns = self

        class Turn(TrainerCallback):
            started: float | None = None
            cpu_started = 0.0

            def _hand_over(self):
                if self.started is not None:
                    turns.times[name].append(time.perf_counter() - self.started)
                    turns.cpu[name].append(time.thread_time() - self.cpu_started)
                turns.save(name)
                with turns.cond:
                    turns.turn = "on" if name == "off" else "off"
                    turns.cond.notify_all()

            def on_step_begin(self, args, state, control, **kwargs):
                if self.started is not None:
                    self._hand_over()
                with turns.cond:
                    turns.cond.wait_for(lambda: turns.turn == name)
                turns.restore(name)
                turns.trainers.add(threading.get_ident())
                if name == "on" and len(turns.times["on"]) == 1:  # after the warm-up step
                    turns.background.append(background_cpu(turns.trainers))
                    turns.child.append(process_cpu(turns.child_pid))
                self.started, self.cpu_started = time.perf_counter(), time.thread_time()

            def on_train_end(self, args, state, control, **kwargs):
                self._hand_over()  # the last step (its log included)
                self.started = None
                if name == "on":  # before train() returns and finishes the telemetry
                    turns.background.append(background_cpu(turns.trainers))
                    turns.child.append(process_cpu(turns.child_pid))

        return Turn()


class Clock:
    """One trainer's step times, begin to next begin, and its process's CPU time over the same span."""

    WARMUP = 5  # steps left out: first-call allocations, lazy imports, the first compile of each path

    def __init__(self) -> None:
        self.marks: list[tuple[float, float, float]] = []  # (perf_counter, thread_time, process_time)

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class Tick(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                clock.marks.append((time.perf_counter(), time.thread_time(), time.process_time()))

            def on_train_end(self, args, state, control, **kwargs):  # before our callback finishes the telemetry
                clock.marks.append((time.perf_counter(), time.thread_time(), time.process_time()))

        return Tick()

    def figures(self) -> dict[str, float]:
        """Per step, in ms, over the steps after the warm-up: mean wall, trainer-thread CPU, process CPU."""
        (w0, t0, p0), (w1, t1, p1) = self.marks[self.WARMUP], self.marks[-1]
        n = len(self.marks) - 1 - self.WARMUP
        return {"step": (w1 - w0) / n * 1e3, "thread_cpu": (t1 - t0) / n * 1e3, "process_cpu": (p1 - p0) / n * 1e3}


def background_cpu(trainers: set[int]) -> dict[int, float]:
    """CPU seconds of each Python thread other than the trainers and the main thread: the
    telemetry's emitter, span processor and metric reader (the uninstrumented trainer has none)."""
    out = {}
    for t in threading.enumerate():
        if t.ident in trainers or t is threading.main_thread() or t.ident is None:
            continue
        try:
            out[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # ended meanwhile
            pass
    return out


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of another process; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def accounting():
    """Wall (perf_counter) and CPU (thread_time) time inside our hooks' work and the logged-step flush."""
    from otel_grpo.integrations.trl import _callback, _capture

    spent = [0.0, 0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0
                spent[1] += time.thread_time() - c0
        return wrapper

    _capture.Capture._guard = timed(_capture.Capture._guard)
    _callback.InstrumentedCallback.flush = timed(_callback.InstrumentedCallback.flush)
    return spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--steps", type=int, default=40, help="paired steps per round")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each in a fresh process")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--logging-steps", type=int, default=1,
                   help="TRL's logging_steps: 1 (every step logged and flushed, the worst case) or TRL's default 10")
    p.add_argument("--emit-in", choices=["thread", "process"], default="process",
                   help="the instrumented run's TelemetrySettings.emit_in")
    p.add_argument("--design", choices=["paired", "separate"], default="paired",
                   help="paired: two trainers take turns in one process; separate: one process each, "
                        "every background cost charged to the instrumented run")
    p.add_argument("--round", type=int, default=None, help=argparse.SUPPRESS)  # a child: run one round
    p.add_argument("--only", choices=["on", "off"], default=None, help=argparse.SUPPRESS)  # separate: one trainer
    a = p.parse_args()
    if a.round is not None:
        result = one_trainer(a) if a.only else one_round(a)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for r in range(a.rounds):
        cmd = [sys.executable, __file__, "--preset", a.preset, "--steps", str(a.steps), "--threads", str(a.threads),
               "--logging-steps", str(a.logging_steps), "--emit-in", a.emit_in, "--round", str(r)]
        if a.design == "paired":
            results.append(_child(cmd))
        else:
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            runs = {name: _child(cmd + ["--only", name]) for name in order}
            results.append({f"{k}_{name}": v for name, run in runs.items() for k, v in run.items()})
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[-1].items()), flush=True)
    (report if a.design == "paired" else report_separate)(a, results)


def _child(cmd: list[str]) -> dict[str, float]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.rsplit("RESULT ", 1)[1])


def _prepare(a, max_steps: int) -> tuple[Path, str, dict]:
    """torch's threads set; a fresh folder, the preset's model saved in it, the GRPOConfig overrides."""
    import torch

    torch.set_num_threads(a.threads)
    preset = PRESETS[a.preset]
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    model = save_model(tmp / "model", preset["model"])
    config = {**preset["config"], "max_steps": max_steps, "num_iterations": 2, "log_completions": False,
              "logging_steps": a.logging_steps}
    return tmp, model, config


def _instrument(trainer, tmp: Path, port: int, a):
    """`instrument` as a user calls it, exporting to the sink."""
    from otel_grpo.integrations import instrument

    return instrument(trainer, run_id="bench-trl", output_dir=tmp / "telemetry",
                      otlp_endpoint=f"http://127.0.0.1:{port}", emit_in=a.emit_in)


def one_round(a) -> dict[str, float]:
    """One process: both trainers, `a.steps` paired steps; figures in ms per step."""
    import tiny_trl

    tmp, model, config = _prepare(a, a.steps + 1)
    turns, spent = Turns(), accounting()
    names = ["off", "on"] if a.round % 2 == 0 else ["on", "off"]  # which one allocates first alternates
    trainers = {n: tiny_trl.make_grpo_trainer(tmp / n, model_dir=model, callbacks=[turns.callback(n)], **config)
                for n in names}
    sink, port = _start_sink()
    try:
        turns.child_pid = getattr(_instrument(trainers["on"], tmp, port, a)._sink, "pid", None)
        threads = [threading.Thread(target=trainers[n].train) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sink.terminate()
    return figures(turns, spent, a.logging_steps)


def one_trainer(a) -> dict[str, float]:
    """One process, one trainer (`a.only`: instrumented or not), `a.steps` steps after the warm-up."""
    import tiny_trl

    tmp, model, config = _prepare(a, a.steps + Clock.WARMUP)
    clock = Clock()
    trainer = tiny_trl.make_grpo_trainer(tmp / a.only, model_dir=model, callbacks=[clock.callback()], **config)
    sink, port = _start_sink()  # in both runs: the same processes on the machine
    try:
        if a.only == "on":
            _instrument(trainer, tmp, port, a)
        trainer.train()
    finally:
        sink.terminate()
    return clock.figures()


def _start_sink():
    """benchmarks/otlp_sink.py's receiver (this folder is off sys.path: see the top of the file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("otlp_sink", ROOT / "benchmarks" / "otlp_sink.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start_sink()


def figures(turns: Turns, spent: list[float], logging_steps: int) -> dict[str, float]:
    """Medians over windows of `logging_steps` steps (one logged step each), of each window's mean:
    with logging_steps > 1 a median over single steps would leave the logged step's flush out."""
    times, cpu = turns.times, turns.cpu
    off, on = times["off"][1:], times["on"][1:]  # the first step of each warms up
    n = min(len(off), len(on))
    cpu_off, cpu_on = cpu["off"][1:n + 1], cpu["on"][1:n + 1]
    first, last = turns.background
    ms = 1e3
    return {
        "off": statistics.median(off[:n]) * ms,
        "on": statistics.median(on[:n]) * ms,
        "paired": statistics.median(_window_means([b - x for x, b in zip(off[:n], on[:n])], logging_steps)) * ms,
        "paired_cpu": statistics.median(_window_means([b - x for x, b in zip(cpu_off, cpu_on)], logging_steps)) * ms,
        "hooks": spent[0] / len(times["on"]) * ms,
        "hooks_cpu": spent[1] / len(times["on"]) * ms,
        "background_cpu": sum(last[k] - first.get(k, 0.0) for k in last) / n * ms,
        "child_cpu": (turns.child[1] - turns.child[0]) / n * ms,
    }


def _window_means(values: list[float], size: int) -> list[float]:
    return [statistics.fmean(values[i : i + size]) for i in range(0, len(values) - size + 1, size)]


def report(a, results: list[dict[str, float]]) -> None:
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    span = {k: (min(r[k] for r in results), max(r[k] for r in results)) for k in results[0]}

    def line(key: str) -> str:
        return f"{med[key]:+.2f} ms (rounds {span[key][0]:+.2f} .. {span[key][1]:+.2f})"

    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch threads {a.threads}; preset {a.preset}, logging_steps {a.logging_steps}; "
          f"{a.rounds} rounds x {a.steps} paired steps; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"step median off {med['off']:.1f} ms, on {med['on']:.1f} ms, ratio on/off {med['on'] / med['off']:.4f}")
    print(f"median paired difference on - off: {line('paired')} = {med['paired'] / med['off'] * 100:+.2f}% of a step")
    print(f"median paired training-thread CPU on - off: {line('paired_cpu')}")
    print(f"inside our hooks and flush: {line('hooks')} = {med['hooks'] / med['off'] * 100:.2f}% of a step; "
          f"their CPU time {line('hooks_cpu')}")
    print(f"telemetry threads' CPU (emitter, exporters; with emit_in=process the pipe's): "
          f"{line('background_cpu')} per step")
    if a.emit_in == "process":
        print(f"telemetry process's CPU (emitter, exporters; off the trainer's GIL): {line('child_cpu')} per step")
    bound = statistics.median(r["hooks"] + r["background_cpu"] for r in results)
    print(f"bound, hooks and flush + telemetry threads: {bound:.2f} ms = {bound / med['off'] * 100:.2f}% of a step")


def report_separate(a, results: list[dict[str, float]]) -> None:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    def diff(key: str) -> str:
        d = [r[f"{key}_on"] - r[f"{key}_off"] for r in results]
        return f"{statistics.median(d):+.2f} ms (rounds {min(d):+.2f} .. {max(d):+.2f})"

    ratio = statistics.median(r["step_on"] / r["step_off"] for r in results)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch threads {a.threads}; preset {a.preset}, logging_steps {a.logging_steps}; "
          f"{a.rounds} rounds x 2 processes x {a.steps} steps (after {Clock.WARMUP} warm-up); "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"mean step off {med('step_off'):.2f} ms, on {med('step_on'):.2f} ms (medians over rounds); "
          f"median ratio on/off {ratio:.4f}")
    print(f"median on - off of the mean step: {diff('step')}")
    print(f"median on - off of the trainer thread's CPU: {diff('thread_cpu')}")
    print(f"median on - off of the process's CPU (every thread): {diff('process_cpu')}")


if __name__ == "__main__":
    main()
