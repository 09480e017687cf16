"""A real `trl.GRPOTrainer` small enough for the CPU: a Llama built from a config and a
tokenizer trained on the fly with `tokenizers` (nothing is downloaded).

    trainer = make_grpo_trainer(tmp_path, max_steps=4, beta=0.04)
    trainer.train()

Tests import this; `python -m tests._support.tiny_trl OUT_DIR` runs one training for a
subprocess (torchrun) or by hand.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "one", "two", "three", "yes", "no"]
PROMPTS = [f"say {a} {b}" for a in WORDS[:6] for b in WORDS[6:]]  # 36 distinct prompts


def make_tokenizer() -> Any:
    """A word-level tokenizer trained on the task's words (readable completions), wrapped for transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(PROMPTS + WORDS, trainers.WordLevelTrainer(special_tokens=["<pad>", "<eos>", "<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def make_model(tokenizer: Any, seed: int = 0) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def reward_words(completions: list[str], **_: Any) -> list[float]:
    """1 per task word in the completion, at most 2."""
    return [float(min(sum(w in c.split() for w in WORDS), 2)) for c in completions]


def reward_short(completions: list[str], **_: Any) -> list[float]:
    """Prefers short completions: 1 - length / 40 characters."""
    return [1.0 - min(len(c), 40) / 40 for c in completions]


def make_dataset(n: int = len(PROMPTS)) -> Any:
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [PROMPTS[i % len(PROMPTS)] for i in range(n)]})


def save_tiny_model(directory: str | Path, tokenizer_maker: Any = None, model_maker: Any = None) -> str:
    """The tiny model and its tokenizer saved as a local checkpoint (TRL loads the reference from it), once;
    another tiny model's makers (`tiny_tools`) save theirs the same way."""
    directory = Path(directory)
    if not (directory / "config.json").exists():
        tokenizer = (tokenizer_maker or make_tokenizer)()
        (model_maker or make_model)(tokenizer).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    return str(directory)


def make_grpo_trainer(output_dir: str | Path, *, callbacks: list | None = None, trainer_class: Any = None,
                      model_dir: str | Path | None = None, reward_funcs: list | None = None,
                      peft_config: Any = None, eval_dataset: Any = None, rollout_func: Any = None,
                      **config: Any) -> Any:
    """A `GRPOTrainer` (or `trainer_class`) on the tiny model; `config` overrides `GRPOConfig` fields;
    `peft_config` (a `peft.LoraConfig`) trains an adapter instead of the whole model; `rollout_func` generates in
    TRL's place.

    The model is saved under `model_dir` (default `<output_dir>/tiny-model`) and loaded from
    there by path, as a user's checkpoint would be. `reward_funcs` default: reward_words, reward_short.
    """
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    model_path = save_tiny_model(model_dir or Path(output_dir) / "tiny-model")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    args = GRPOConfig(**{
        "output_dir": str(output_dir), "per_device_train_batch_size": 4, "num_generations": 4,
        "max_completion_length": 8, "max_steps": 3, "logging_steps": 1, "learning_rate": 1e-3,
        "report_to": "none", "save_strategy": "no", "use_cpu": True, "seed": 0, "beta": 0.04,
        "disable_tqdm": True, "reward_weights": [1.0, 0.5], **config})
    cls = trainer_class or GRPOTrainer
    return cls(model=model_path, reward_funcs=reward_funcs or [reward_words, reward_short], args=args,
               train_dataset=make_dataset(), processing_class=tokenizer, callbacks=callbacks, peft_config=peft_config,
               eval_dataset=eval_dataset, rollout_func=rollout_func)


if __name__ == "__main__":
    make_grpo_trainer(sys.argv[1], max_steps=int(sys.argv[2]) if len(sys.argv) > 2 else 3).train()
