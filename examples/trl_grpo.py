"""Train a TRL GRPOTrainer with otel-grpo watching, against the local stack.

    otel-grpo up &                          # sidecar :8000, Prometheus :9090, Alertmanager :9093
    python examples/trl_grpo.py --steps 20  # then: http://127.0.0.1:8000 (samples), Prometheus (metrics)

The one line that matters is `instrument(trainer)`. Everything else builds a tiny
Llama and a word-level tokenizer on the fly (no download; pass `--model` for a real
checkpoint) and two reward functions. The environment defaults below point the
exporters at `otel-grpo up`: Prometheus scrapes the trainer's /metrics on :9464, sample
records and step spans go to the sidecar over OTLP/HTTP. Set them yourself for a
collector (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_GRPO_METRICS_EXPORTERS=otlp`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "one", "two", "three", "yes", "no"]
PROMPTS = [f"say {a} {b}" for a in WORDS[:6] for b in WORDS[6:]]


def reward_words(completions, **_):
    """1 per task word in the completion, at most 2."""
    return [float(min(sum(w in c.split() for w in WORDS), 2)) for c in completions]


def reward_short(completions, **_):
    """Prefers short completions."""
    return [1.0 - min(len(c), 40) / 40 for c in completions]


def tiny_model(directory: Path) -> str:
    """A 2-layer Llama and a word-level tokenizer trained on the prompts, saved as a local checkpoint."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(PROMPTS + WORDS, trainers.WordLevelTrainer(special_tokens=["<pad>", "<eos>", "<unk>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--model", help="a local checkpoint (default: a tiny model built here)")
    parser.add_argument("--output-dir", default="runs/trl-grpo-example")
    parser.add_argument("--sidecar", default="http://127.0.0.1:8000", help="the sidecar `otel-grpo up` started")
    parser.add_argument("--metrics-port", type=int, default=9464, help="where Prometheus scrapes the trainer")
    a = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OTEL_GRPO_METRICS_EXPORTERS", "prometheus")
    os.environ.setdefault("OTEL_GRPO_PROMETHEUS_PORT", str(a.metrics_port))
    os.environ.setdefault("OTEL_GRPO_TRACES_EXPORTERS", "otlp")
    os.environ.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    os.environ.setdefault("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{a.sidecar}/v1/traces")

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from otel_grpo.integrations import instrument

    model = a.model or tiny_model(Path(tempfile.mkdtemp(prefix="tiny-llama-")))
    args = GRPOConfig(output_dir=a.output_dir, run_name=Path(a.output_dir).name, max_steps=a.steps,
                      per_device_train_batch_size=8, num_generations=4, max_completion_length=8, logging_steps=1,
                      learning_rate=1e-3, beta=0.04, num_iterations=2, reward_weights=[1.0, 0.5],
                      report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward_words, reward_short], args=args,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    telemetry = instrument(trainer)   # <- the one line
    trainer.train()                   # finishes the telemetry (grpo.run.finished = 1) when done
    if sidecar_up(a.sidecar):
        print(f"run {telemetry.run_id}: samples at {a.sidecar}, metrics in Prometheus (grpo_reward_mean, grpo_kl, ...)")
    else:
        print(f"run {telemetry.run_id}: the sidecar at {a.sidecar} did not answer; the samples are in "
              f"{Path(a.output_dir) / 'samples'} (the local spill)")


def sidecar_up(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/healthz", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
