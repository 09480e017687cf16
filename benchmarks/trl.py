"""The CPU `instrument` costs a TRL GRPOTrainer's process per step, beside TensorBoard, trackio and wandb.

    python benchmarks/trl.py [--preset tiny|large] [--steps N] [--rounds R] [--threads N] [--logging-steps L]
                             [--peers tensorboard,trackio,wandb|none] [--busy] [--emit-in process|thread]

Arms: the trainer uninstrumented ("off"); instrumented as a user would ("on": `instrument(trainer)`
with the default exporters, OTLP/HTTP spans and metrics to a receiver process that discards them,
metrics pushed every 10 s, samples spilled, the emitter and exporters in a child process, or on
threads of the trainer's process with `--emit-in thread`); and one
per peer reporting through transformers' own `report_to` (TensorBoardCallback: an event file;
TrackioCallback: its local SQLite store; WandbCallback with `WANDB_MODE=offline`: its `wandb-core`
service process writing a local run). Each arm trains on the main thread of a fresh process, as a
user's trainer does; every round runs every arm, one after the other (the order rotates), so the
arms share the machine's state of those minutes. All arms start from the same checkpoint and seed.

The gate is the trainer process's CPU per step that the arm adds, by per-thread CPU clocks:
  - callbacks: the training thread's CPU inside the arm's code (ours: the capture hooks and our
    callback's methods, the logged-step flush among them; a peer's: its callback's methods);
  - threads: the CPU of the Python threads the process runs besides the training thread (ours: the
    pipe to the child; TensorBoard's event writer; trackio's sender; wandb's service client).
Per-thread clocks, not the process's CPU minus the uninstrumented run's: the training itself (torch's
threads) spends tens of ms of CPU a step, and its spread between processes is wider than the 1-3 ms
to be measured. Neither wall time counts in the gate: TensorBoard's `on_log` calls `flush()`, which
waits for its writer thread, so the writer's CPU lies inside the callback's wall time (adding the
two counted it twice); and a wait there is no CPU taken from training. What the gate leaves out:
GIL waits the training thread spends while an arm's thread runs (it is CPU the threads figure has),
and cache effects; the wall and process-CPU differences against "off" are printed beside it, with
their round ranges, as the check. The CPU of the arm's child processes (ours: the telemetry process,
at `emit_nice` 10; wandb: wandb-core) is reported beside the gate, not in it: another process, on
another core when there is one.

Windows: after a warm-up of whole logging windows (at least 5 steps), `--steps` steps (rounded up to
whole windows of `--logging-steps`), from one step's begin to a later one's: each logged step's flush
falls inside. `--busy` runs a busy-loop process throughout (the other core taken, as on a node where
every core trains). Figures per step, ms, medians over rounds (round ranges).

trackio and wandb are no dependencies of this project: install them apart (benchmarks/README.md).
Targets (issue 11): <= 2 ms per step on the tiny CPU model; <= 2% on a model whose step takes >= 1 s
(`--preset large`).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
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

# the peers: transformers' `report_to` name -> its callback class
PEER_CALLBACKS = {"tensorboard": "TensorBoardCallback", "trackio": "TrackioCallback", "wandb": "WandbCallback"}
FIGURES = ("step", "process_cpu", "callbacks_cpu", "callbacks_wall", "threads_cpu", "gate", "children_cpu")

PRESETS = {
    # the test fixture's model: tens of ms per step on CPU
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


class Meter:
    """The arm's CPU and wall time inside its code on the training thread (counted only between `start` and
    `stop`; a call nested in another timed one counts once), and the window's readings."""

    def __init__(self) -> None:
        self.on = False
        self.depth = 0
        self.cpu = self.wall = 0.0
        self.marks: list[dict[str, float]] = []

    def timed(self, fn):
        meter = self

        def wrapper(*args, **kwargs):
            if not meter.on or meter.depth:
                return fn(*args, **kwargs)
            meter.depth += 1
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                meter.wall += time.perf_counter() - t0
                meter.cpu += time.thread_time() - c0
                meter.depth -= 1
        return wrapper

    def own(self, hook):
        """A capture hook `hook(original, ...)`: its CPU and wall less the TRL method's inside it (hooks nested
        in that method add their own)."""
        meter = self

        def wrapper(original, *args, **kwargs):
            if not meter.on:
                return hook(original, *args, **kwargs)
            inside = [0.0, 0.0]

            def trl(*a, **k):
                t0, c0 = time.perf_counter(), time.thread_time()
                try:
                    return original(*a, **k)
                finally:
                    inside[0] += time.perf_counter() - t0
                    inside[1] += time.thread_time() - c0
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return hook(trl, *args, **kwargs)
            finally:
                meter.wall += time.perf_counter() - t0 - inside[0]
                meter.cpu += time.thread_time() - c0 - inside[1]
        return wrapper

    def mark(self, exclude: set[int]) -> None:
        """Readings at a window edge: wall, process CPU, the other Python threads' CPU, the children's CPU."""
        self.marks.append({"wall": time.perf_counter(), "process": time.process_time(), "threads": threads_cpu(),
                           "children": children_cpu(os.getpid(), exclude), "cb_cpu": self.cpu,
                           "cb_wall": self.wall})


def threads_cpu() -> float:
    """CPU seconds of every Python thread but the training (main) thread, as far as they ran so far."""
    total = 0.0
    for t in threading.enumerate():
        if t is threading.main_thread() or t.ident is None:
            continue
        try:
            total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # ended meanwhile
            pass
    return total


def children_cpu(pid: int, exclude: set[int]) -> float:
    """CPU seconds (user + system) of `pid`'s descendant processes, less those in `exclude` and theirs."""
    total = 0.0
    for child in _children(pid):
        if child in exclude:
            continue
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        total += children_cpu(child, exclude)
    return total


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def window(logging_steps: int, steps: int) -> tuple[int, int]:
    """(warm-up steps, measured steps): whole logging windows, the warm-up at least 5 steps."""
    warmup = logging_steps * math.ceil(5 / logging_steps)
    return warmup, logging_steps * math.ceil(steps / logging_steps)


def one_arm(a) -> dict[str, float]:
    """One process, one arm's trainer on the main thread; figures in ms per measured step."""
    import torch

    import tiny_trl
    from transformers import TrainerCallback

    torch.set_num_threads(a.threads)
    warmup, measured = window(a.logging_steps, a.steps)
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    os.environ["TRACKIO_DIR"] = str(tmp / "trackio")  # read when trackio is imported (by the trainer, below)
    os.environ.update(WANDB_MODE="offline", WANDB_DIR=str(tmp), WANDB_SILENT="true", WANDB_PROJECT="bench-trl")
    model = save_model(tmp / "model", PRESETS[a.preset]["model"])
    config = {**PRESETS[a.preset]["config"], "max_steps": warmup + measured + 1, "num_iterations": 2,
              "log_completions": False, "logging_steps": a.logging_steps}
    meter = Meter()
    sink, port = _start_sink()  # in every arm: the same processes on the machine
    exclude = {sink.pid}

    class Window(TrainerCallback):
        """Opens the window at the begin of the first step after the warm-up (the warm-up's last log is done by
        then: a step's log follows its end) and closes it at the begin of the step after the last measured one.
        Given at construction, it runs before `instrument`'s callback, at both edges alike."""

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step in (warmup, warmup + measured):
                meter.mark(exclude)
                meter.on = state.global_step == warmup

    try:
        trainer = tiny_trl.make_grpo_trainer(tmp / a.arm, model_dir=model, callbacks=[Window()], **config,
                                             **({"report_to": a.arm} if a.arm in PEER_CALLBACKS else {}))
        if a.arm == "on":
            _instrument(trainer, tmp, port, a.emit_in)
        _time_arm(trainer, a.arm, meter)
        trainer.train()
    finally:
        sink.terminate()
    first, last = meter.marks[0], meter.marks[-1]
    per = 1e3 / measured
    out = {"step": (last["wall"] - first["wall"]) * per, "process_cpu": (last["process"] - first["process"]) * per,
           "callbacks_cpu": (last["cb_cpu"] - first["cb_cpu"]) * per,
           "callbacks_wall": (last["cb_wall"] - first["cb_wall"]) * per,
           "threads_cpu": (last["threads"] - first["threads"]) * per,
           "children_cpu": (last["children"] - first["children"]) * per}
    out["gate"] = out["callbacks_cpu"] + out["threads_cpu"]
    return out


def _time_arm(trainer, arm: str, meter: Meter) -> None:
    """Time the arm's code on the training thread: every `on_*` method of its callbacks (ours: those of the
    callbacks `instrument` added; a peer's: its report_to callback), and ours' capture hooks."""
    if arm == "off":
        return
    if arm == "on":
        from otel_grpo.integrations.trl import _capture

        mine = [c for c in trainer.callback_handler.callbacks if type(c).__module__.startswith("otel_grpo")]
        hooks = {name: getattr(trainer, name, None) for name in _capture.WRAPPED}
        if not mine or not all(isinstance(h, functools.partial) for h in hooks.values()):
            raise SystemExit("benchmarks/trl.py: otel-grpo's TRL callback or its hooks (functools.partial of "
                             "the hook and TRL's method) not found; update _time_arm to the integration's hooks")
        for name, wrapped in hooks.items():  # each hook whole, less the TRL method it wraps
            setattr(trainer, name, functools.partial(meter.own(wrapped.func), *wrapped.args))
    else:
        from transformers import integrations

        cls = getattr(integrations, PEER_CALLBACKS[arm])
        mine = [c for c in trainer.callback_handler.callbacks if isinstance(c, cls)]
    for callback in mine:
        for name in dir(callback):
            if name.startswith("on_") and callable(getattr(callback, name)):
                setattr(callback, name, meter.timed(getattr(callback, name)))


def _instrument(trainer, tmp: Path, port: int, emit_in: str):
    """`instrument` as a user calls it, exporting to the sink."""
    from otel_grpo.integrations import instrument

    return instrument(trainer, run_id="bench-trl", output_dir=tmp / "telemetry",
                      otlp_endpoint=f"http://127.0.0.1:{port}", emit_in=emit_in)


def _start_sink():
    """benchmarks/otlp_sink.py's receiver (this folder is off sys.path: see the top of the file)."""
    spec = importlib.util.spec_from_file_location("otlp_sink", ROOT / "benchmarks" / "otlp_sink.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start_sink()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--steps", type=int, default=40, help="measured steps per arm and round")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every arm in a fresh process")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--logging-steps", type=int, default=1,
                   help="TRL's logging_steps: 1 (every step logged and flushed, the worst case) or TRL's default 10")
    p.add_argument("--peers", type=_peers, default=["tensorboard"],
                   help=f"comma-separated peers ({', '.join(PEER_CALLBACKS)}) or none; default tensorboard")
    p.add_argument("--busy", action="store_true", help="a busy-loop process runs throughout")
    p.add_argument("--emit-in", choices=["process", "thread"], default="process",
                   help="the instrumented run's TelemetrySettings.emit_in")
    p.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # a child: run one arm
    a = p.parse_args()
    for peer in a.peers:
        if importlib.util.find_spec(peer) is None:
            p.error(f"--peers {peer}: {peer} is not importable (see benchmarks/README.md to install it apart)")
    if a.arm is not None:
        print("RESULT " + json.dumps(one_arm(a)), flush=True)
        return
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.busy else None
    arms = ["off", "on", *a.peers]
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    loads = [os.getloadavg()[0]]
    try:
        for r in range(a.rounds):
            for arm in arms[r % len(arms):] + arms[:r % len(arms)]:
                cmd = [sys.executable, __file__, "--preset", a.preset, "--steps", str(a.steps), "--threads",
                       str(a.threads), "--logging-steps", str(a.logging_steps), "--peers", ",".join(a.peers) or "none",
                       "--emit-in", a.emit_in, "--arm", arm]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                results[arm].append(json.loads(out.rsplit("RESULT ", 1)[1]))
                print(f"round {r + 1} {arm}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[arm][-1].items()),
                      flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        if busy is not None:
            busy.kill()
    report(a, results, loads)


def _peers(value: str) -> list[str]:
    peers = [] if value == "none" else value.split(",")
    unknown = [p for p in peers if p not in PEER_CALLBACKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer {unknown[0]!r}: choose from "
                                         f"{', '.join(PEER_CALLBACKS)} or none")
    return peers


def report(a, results: dict[str, list[dict[str, float]]], loads: list[float]) -> None:
    def cell(values: list[float], sign: str = "") -> str:
        return f"{statistics.median(values):{sign}.2f} ({min(values):{sign}.2f} .. {max(values):{sign}.2f})"

    warmup, measured = window(a.logging_steps, a.steps)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch threads {a.threads}; preset {a.preset}, logging_steps {a.logging_steps}, emit_in {a.emit_in}; "
          f"{a.rounds} rounds x "
          f"{measured} steps (after {warmup}) per arm{'; a busy-loop process throughout' if a.busy else ''}; "
          f"load average {min(loads):.1f}-{max(loads):.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("per step, ms: median over rounds (range)")
    off = results["off"]
    for arm, runs in results.items():
        print(f"[{arm}]")
        for key in FIGURES:
            print(f"  {key:15s} {cell([r[key] for r in runs])}")
        if arm != "off":
            for key in ("step", "process_cpu"):
                print(f"  {key + ' - off':15s} {cell([r[key] - o[key] for r, o in zip(runs, off)], '+')}")
    ours = [r["gate"] for r in results["on"]]
    for peer in a.peers:
        theirs = [r["gate"] for r in results[peer]]
        print(f"gate otel-grpo / {peer}: {statistics.median(ours) / statistics.median(theirs):.2f} "
              f"(rounds {min(o / t for o, t in zip(ours, theirs)):.2f} .. {max(o / t for o, t in zip(ours, theirs)):.2f})")


if __name__ == "__main__":
    main()
