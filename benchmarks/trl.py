"""Training-thread time `instrument` adds to a TRL GRPOTrainer step, paired on and off in one run.

    python benchmarks/trl.py [--preset tiny|large] [--steps N] [--threads N]

Two GRPOTrainers built from the same seed and checkpoint (identical batches), one
instrumented (spans and sample events to an in-memory exporter, metrics to an
in-memory reader, samples spilled) and one not, run in two threads that take turns
step by step: a callback hands the turn over at every `on_step_begin`, so exactly one
trains at a time and each step is timed from its begin to the next begin (log and
telemetry flush included). The emitter thread of the instrumented run keeps running
in the background, as in real use. Reported: the median per-step difference on - off
over paired steps, the ratio of the medians, and the time spent inside our hooks and
the logged-step flush (perf_counter around them) per step, the direct figure.

Targets (issue 11): <= 2 ms per step on the tiny CPU model; <= 2% on a model whose
step takes >= 1 s (`--preset large`).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
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
    "large": {"model": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 6,
                        "num_attention_heads": 8, "num_key_value_heads": 8},
              "config": {"per_device_train_batch_size": 16, "num_generations": 8, "max_completion_length": 32}},
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

            def _hand_over(self):
                if self.started is not None:
                    turns.times[name].append(time.perf_counter() - self.started)
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
                self.started = time.perf_counter()

            def on_train_end(self, args, state, control, **kwargs):
                self._hand_over()  # the last step (its log included)
                self.started = None

        return Turn()


def accounting():
    """perf_counter spent inside our hooks' work and the logged-step flush (training thread)."""
    from otel_grpo.integrations.trl import _callback, _hooks

    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0
        return wrapper

    _hooks.Hooks._guard = timed(_hooks.Hooks._guard)
    _callback.InstrumentedCallback.flush = timed(_callback.InstrumentedCallback.flush)
    return spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import torch
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tiny_trl
    from otel_grpo.integrations import instrument
    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    torch.set_num_threads(a.threads)
    preset = PRESETS[a.preset]
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    model = save_model(tmp / "model", preset["model"])
    config = {**preset["config"], "max_steps": a.steps + 1, "num_iterations": 2, "log_completions": False}
    turns, spent = Turns(), accounting()
    off = tiny_trl.make_grpo_trainer(tmp / "off", model_dir=model, callbacks=[turns.callback("off")], **config)
    on = tiny_trl.make_grpo_trainer(tmp / "on", model_dir=model, callbacks=[turns.callback("on")], **config)
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    tel = Telemetry(TelemetrySettings(run_id="bench-trl", output_dir=tmp / "telemetry"),
                    meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider=tracer)
    instrument(on, telemetry=tel)
    threads = [threading.Thread(target=t.train) for t in (off, on)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report(a, turns.times, spent[0])


def report(a, times: dict[str, list[float]], spent: float) -> None:
    off, on = times["off"][1:], times["on"][1:]  # the first step of each warms up
    n = min(len(off), len(on))
    diffs = [b - x for x, b in zip(off[:n], on[:n])]
    m_off, m_on = statistics.median(off[:n]), statistics.median(on[:n])
    steps = len(times["on"])
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch threads {a.threads}; preset {a.preset}; {n} paired steps; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"step median off {m_off * 1e3:.1f} ms, on {m_on * 1e3:.1f} ms, ratio on/off {m_on / m_off:.4f}")
    print(f"median paired difference on - off: {statistics.median(diffs) * 1e3:+.2f} ms "
          f"({statistics.median(diffs) / m_off * 100:+.2f}%)")
    print(f"inside our hooks and flush: {spent / steps * 1e3:.2f} ms per step ({spent / steps / m_off * 100:.2f}% of a step)")


if __name__ == "__main__":
    main()
