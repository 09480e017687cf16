"""Training-thread time `instrument` adds to a TRL GRPOTrainer step, paired on and off in one run.

    python benchmarks/trl.py [--preset tiny|large] [--steps N] [--rounds R] [--threads N] [--logging-steps L]
                             [--design paired|separate] [--peers tensorboard,trackio|none]

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

Peers (`--peers`, paired design; default tensorboard): more trainers from the same seed
join the turns, each reporting through transformers' own `report_to` ("tensorboard":
TensorBoardCallback, an event file under the trainer's folder; "trackio": TrackioCallback,
its local SQLite store under the round's folder) instead of `instrument`. Every arm is
paired with the uninstrumented one in the same rounds and process, so otel-grpo's
figures are read against the peers' measured beside them: the paired difference, the
time inside the peer's per-step callbacks (on_log; its setup and teardown left out),
and the CPU of the peer's own threads (TensorBoard's event writer, trackio's sender).
trackio is no dependency of this project: install it apart (benchmarks/README.md).

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
import importlib.util
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

# the peers: transformers' `report_to` name -> its callback class, and where its threads' code lives
PEER_CALLBACKS = {"tensorboard": "TensorBoardCallback", "trackio": "TrackioCallback"}
PEER_MODULES = {"tensorboard": ("tensorboard", "torch.utils.tensorboard"), "trackio": ("trackio",)}

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
    """The trainers (`arms`, in turn order) take steps in turn; each step is timed between its
    begin and the next one.

    The RNGs (torch, numpy, random) are global, so each trainer's RNG state is saved when it
    hands the turn over and restored when it gets it back: all sample the same completions.
    """

    def __init__(self, arms: list[str]) -> None:
        self.cond = threading.Condition()
        self.arms = arms
        self.turn = arms[0]
        self.times: dict[str, list[float]] = {n: [] for n in arms}
        self.cpu: dict[str, list[float]] = {n: [] for n in arms}  # the trainer thread's CPU time per step
        self.trainers: set[int] = set()  # thread idents of the trainers
        # CPU of every other Python thread, keyed by (arm, ident): after otel-grpo's warm-up step, and latest
        self.first: dict[tuple[str, int], float] | None = None
        self.last: dict[tuple[str, int], float] = {}
        self.on_done = False  # otel-grpo's trainer has ended: its telemetry finishes, outside the steps
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

    def read_threads(self) -> None:
        """The latest CPU reading of each background thread, taken at every step begin: a peer's
        thread ends inside its trainer's last step (its teardown) and keeps its reading from the
        step before; otel-grpo's stop at its trainer's end (what follows is the telemetry's finish)."""
        if self.first is not None:
            self.last |= {k: v for k, v in background_cpu(self.trainers).items()
                          if not (self.on_done and k[0] == "on")}

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
                    turns.turn = turns.arms[(turns.arms.index(name) + 1) % len(turns.arms)]
                    turns.cond.notify_all()

            def on_step_begin(self, args, state, control, **kwargs):
                if self.started is not None:
                    self._hand_over()
                with turns.cond:
                    turns.cond.wait_for(lambda: turns.turn == name)
                turns.restore(name)
                turns.trainers.add(threading.get_ident())
                if name == "on" and len(turns.times["on"]) == 1:  # after the warm-up step
                    turns.first = background_cpu(turns.trainers)
                    turns.child.append(process_cpu(turns.child_pid))
                turns.read_threads()
                self.started, self.cpu_started = time.perf_counter(), time.thread_time()

            def on_train_end(self, args, state, control, **kwargs):
                self._hand_over()  # the last step (its log included)
                self.started = None
                if name == "on":  # before train() returns and finishes the telemetry
                    turns.read_threads()
                    turns.on_done = True
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


def background_cpu(trainers: set[int]) -> dict[tuple[str, int], float]:
    """CPU seconds of each Python thread other than the trainers and the main thread, keyed by
    (arm, ident): a peer's threads (TensorBoard's event writer, trackio's sender) by where their
    code lives, every other one is the telemetry's (emitter, span processor and metric reader;
    the uninstrumented trainer has none)."""
    out = {}
    for t in threading.enumerate():
        if t.ident in trainers or t is threading.main_thread() or t.ident is None:
            continue
        try:
            out[(_arm_of(t), t.ident)] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # ended meanwhile
            pass
    return out


def _arm_of(thread: threading.Thread) -> str:
    module = getattr(getattr(thread, "_target", None), "__module__", None) or type(thread).__module__
    for peer, prefixes in PEER_MODULES.items():
        if module.startswith(prefixes):
            return peer
    return "on"


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of another process; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def accounting(peers: list[str]) -> dict[str, list[float]]:
    """Wall (perf_counter) and CPU (thread_time) time, per arm, inside our hooks' work and the
    logged-step flush, and inside each peer's per-step callbacks (its setup and teardown, once
    per run, left out)."""
    from transformers import integrations

    from otel_grpo.integrations.trl import _callback, _capture

    spent = {arm: [0.0, 0.0] for arm in ["on", *peers]}

    def timed(arm, fn):
        def wrapper(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[arm][0] += time.perf_counter() - t0
                spent[arm][1] += time.thread_time() - c0
        return wrapper

    _capture.Capture._guard = timed("on", _capture.Capture._guard)
    _callback.InstrumentedCallback.flush = timed("on", _callback.InstrumentedCallback.flush)
    for peer in peers:
        cls = getattr(integrations, PEER_CALLBACKS[peer])
        for name, fn in list(vars(cls).items()):
            if name.startswith("on_") and name not in ("on_train_begin", "on_train_end"):
                setattr(cls, name, timed(peer, fn))
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
    p.add_argument("--peers", type=_peers, default=None,
                   help="comma-separated peers run in the same turns, each through transformers' report_to "
                        f"({', '.join(PEER_CALLBACKS)}), or none (default: tensorboard; paired design only)")
    p.add_argument("--round", type=int, default=None, help=argparse.SUPPRESS)  # a child: run one round
    p.add_argument("--only", choices=["on", "off"], default=None, help=argparse.SUPPRESS)  # separate: one trainer
    a = p.parse_args()
    if a.peers is None:
        a.peers = ["tensorboard"] if a.design == "paired" else []
    if a.design == "separate" and a.peers:
        p.error("--peers: the separate design measures otel-grpo alone")
    if "trackio" in a.peers and importlib.util.find_spec("trackio") is None:
        p.error("--peers trackio: trackio is not importable (see benchmarks/README.md to install it apart)")
    if a.round is not None:
        result = one_trainer(a) if a.only else one_round(a)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for r in range(a.rounds):
        cmd = [sys.executable, __file__, "--preset", a.preset, "--steps", str(a.steps), "--threads", str(a.threads),
               "--logging-steps", str(a.logging_steps), "--emit-in", a.emit_in, "--round", str(r),
               "--peers", ",".join(a.peers) or "none"]
        if a.design == "paired":
            results.append(_child(cmd))
        else:
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            runs = {name: _child(cmd + ["--only", name]) for name in order}
            results.append({f"{k}_{name}": v for name, run in runs.items() for k, v in run.items()})
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[-1].items()), flush=True)
    (report if a.design == "paired" else report_separate)(a, results)


def _peers(value: str) -> list[str]:
    peers = [] if value == "none" else value.split(",")
    unknown = [p for p in peers if p not in PEER_CALLBACKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {unknown[0]!r}: choose from "
                                         f"{', '.join(PEER_CALLBACKS)} or none")
    return peers


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
    """One process: every arm's trainer, `a.steps` paired steps; figures in ms per step."""
    import tiny_trl

    tmp, model, config = _prepare(a, a.steps + 1)
    os.environ["TRACKIO_DIR"] = str(tmp / "trackio")  # read when trackio is imported, below
    arms = ["off", "on", *a.peers]
    names = arms[a.round % len(arms):] + arms[:a.round % len(arms)]  # which one allocates and steps first rotates
    turns, spent = Turns(names), accounting(a.peers)
    trainers = {n: tiny_trl.make_grpo_trainer(tmp / n, model_dir=model, callbacks=[turns.callback(n)],
                                              **config, **({"report_to": n} if n in a.peers else {}))
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
    return figures(turns, spent, a.logging_steps, a.peers)


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
    spec = importlib.util.spec_from_file_location("otlp_sink", ROOT / "benchmarks" / "otlp_sink.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start_sink()


def figures(turns: Turns, spent: dict[str, list[float]], logging_steps: int, peers: list[str]) -> dict[str, float]:
    """Medians over windows of `logging_steps` steps (one logged step each), of each window's mean:
    with logging_steps > 1 a median over single steps would leave the logged step's flush out.
    otel-grpo's keys are unprefixed; a peer's carry its name (`tensorboard_paired`, ...), and
    `on_vs_<peer>` pairs otel-grpo's steps with the peer's directly."""
    times, cpu = turns.times, turns.cpu
    n = min(len(t) for t in times.values()) - 1  # the first step of each warms up
    wall = {arm: t[1:n + 1] for arm, t in times.items()}
    thread = {arm: c[1:n + 1] for arm, c in cpu.items()}
    first, last = turns.first, turns.last
    ms = 1e3

    def paired(arm: str, base: str, of: dict[str, list[float]]) -> float:
        return statistics.median(_window_means([b - x for x, b in zip(of[base], of[arm])], logging_steps)) * ms

    out = {"off": statistics.median(wall["off"]) * ms, "child_cpu": (turns.child[1] - turns.child[0]) / n * ms}
    for arm in ["on", *peers]:
        key = "" if arm == "on" else f"{arm}_"
        out |= {
            f"{arm}": statistics.median(wall[arm]) * ms,
            f"{key}paired": paired(arm, "off", wall),
            f"{key}paired_cpu": paired(arm, "off", thread),
            f"{key}hooks": spent[arm][0] / len(times[arm]) * ms,
            f"{key}hooks_cpu": spent[arm][1] / len(times[arm]) * ms,
            f"{key}background_cpu": sum(last[k] - first.get(k, 0.0) for k in last if k[0] == arm) / n * ms,
        }
    for peer in peers:
        out[f"on_vs_{peer}"] = paired("on", peer, wall)
        out[f"on_vs_{peer}_cpu"] = paired("on", peer, thread)
    return out


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
    for peer in a.peers:
        peer_bound = statistics.median(r[f"{peer}_hooks"] + r[f"{peer}_background_cpu"] for r in results)
        print(f"peer {peer} (report_to, same rounds): step median {med[peer]:.1f} ms; paired {peer} - off "
              f"{line(f'{peer}_paired')}; training-thread CPU {line(f'{peer}_paired_cpu')}; "
              f"inside its callbacks {line(f'{peer}_hooks')}, CPU {line(f'{peer}_hooks_cpu')}; "
              f"its threads' CPU {line(f'{peer}_background_cpu')}; bound {peer_bound:.2f} ms")
        print(f"otel-grpo against {peer}: paired {med['paired']:+.2f} / {med[f'{peer}_paired']:+.2f} ms "
              f"(ratio {_ratio(med['paired'], med[f'{peer}_paired'])}), training-thread CPU "
              f"{med['paired_cpu']:+.2f} / {med[f'{peer}_paired_cpu']:+.2f} ms "
              f"(ratio {_ratio(med['paired_cpu'], med[f'{peer}_paired_cpu'])}), "
              f"bound {bound:.2f} / {peer_bound:.2f} ms "
              f"(ratio {_ratio(bound, peer_bound)}); paired on - {peer} directly {line(f'on_vs_{peer}')}, "
              f"CPU {line(f'on_vs_{peer}_cpu')}")


def _ratio(ours: float, peer: float) -> str:
    return f"{ours / peer:.2f}" if peer > 0 else "n/a (the peer's figure is not positive)"


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
