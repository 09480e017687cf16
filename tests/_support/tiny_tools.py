"""A real `trl.GRPOTrainer` whose model calls tools, small and deterministic enough for the CPU.

    trainer = make_tool_trainer(tmp_path, max_steps=3)
    trainer.train()

The model is a "bigram" Llama: its attention and MLP write nothing to the residual stream (their
output projections are zero), so the next token depends on the current token alone, through
one-hot embeddings and an lm_head that holds the chain's log-probabilities. After the assistant
header it calls a tool (`add`, which answers, or `divide`, which raises: a failed call), says
" yes" a few times or stops; after a tool's answer the header comes again, so a completion may hold
several turns and hit the length limit in any of them. The tokenizer is a byte-level BPE trained
on the rendered prompts, with the Qwen2.5 chat template (TRL knows how to parse its tool calls)
and each piece of a tool call as one token. Nothing is downloaded.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from tiny_trl import save_tiny_model  # the directory of both is on sys.path (the tests put it there)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CALL_ADD = '\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n'
CALL_DIVIDE = '\n{"name": "divide", "arguments": {"a": 1, "b": 0}}\n'
PAD, EOS = "<|endoftext|>", "<|im_end|>"
SPECIAL = [PAD, "<|im_start|>", EOS]
WHOLE = ["<tool_call>", "</tool_call>", CALL_ADD, CALL_DIVIDE, " yes"]  # one token each
PROMPT = [{"role": "user", "content": "add one and two"}]


def add(a: int, b: int) -> int:
    """Adds two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def divide(a: int, b: int) -> float:
    """Divides a by b.

    Args:
        a: The dividend.
        b: The divisor.
    """
    return a / b


TOOLS = [add, divide]
NEXT = {  # token -> {next token: probability}; "Ċ" (a newline) ends the assistant header
    "Ċ": {"<tool_call>": 0.6, " yes": 0.3, EOS: 0.1},
    "<tool_call>": {CALL_ADD: 0.6, CALL_DIVIDE: 0.4},
    CALL_ADD: {"</tool_call>": 1.0},
    CALL_DIVIDE: {"</tool_call>": 1.0},
    "</tool_call>": {EOS: 1.0},
    " yes": {" yes": 0.8, EOS: 0.2},
}


def _bpe(corpus: list[str]) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_tokens([AddedToken(t, normalized=False) for t in WHOLE])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def make_tokenizer() -> Any:
    """Trained on a rendered tool-calling conversation (short prompts), rendered by a first, untrained one."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    turns = PROMPT + [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "name": "add",
                                                                                  "content": "3"}]
    text = _bpe(["x"]).apply_chat_template(turns, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    return _bpe([text] * 3)


def make_model(tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    hidden = 64
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    ids = tokenizer.convert_tokens_to_ids
    with torch.no_grad():
        for layer in model.model.layers:  # the residual stream stays the current token's embedding
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for dim, (token, following) in enumerate(NEXT.items()):
            model.model.embed_tokens.weight[ids(token), dim] = 1.0
            logits = torch.full((len(tokenizer),), -40.0)
            for nxt, p in following.items():
                logits[ids(nxt)] = math.log(p)
            # the final RMSNorm scales a one-hot row by sqrt(hidden)
            model.lm_head.weight[:, dim] = logits / math.sqrt(hidden)
    return model


def reward_answered(completions: list[list[dict]], **_: Any) -> list[float]:
    """1 when a tool answered 3."""
    return [float(any(m["role"] == "tool" and m["content"] == "3" for m in c)) for c in completions]


def reward_short(completions: list[list[dict]], **_: Any) -> list[float]:
    return [-0.01 * len(str(c)) for c in completions]


def make_tool_trainer(output_dir: str | Path, *, trainer_class: Any = None, **config: Any) -> Any:
    """A `GRPOTrainer` (or `trainer_class`) with `tools=TOOLS` on the bigram model; `config` overrides
    `GRPOConfig` fields. A tool round (call, answer, header) takes 26 of the 28 completion tokens: the
    model's turn after it is cut short (truncated) unless it stops at once."""
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    model_path = save_tiny_model(Path(output_dir) / "tool-model", make_tokenizer, make_model)
    args = GRPOConfig(**{
        "output_dir": str(output_dir), "per_device_train_batch_size": 8, "num_generations": 4,
        "max_completion_length": 28, "max_steps": 3, "logging_steps": 1, "learning_rate": 1e-3,
        "report_to": "none", "save_strategy": "no", "use_cpu": True, "seed": 0, "beta": 0.04,
        "disable_tqdm": True, **config})
    cls = trainer_class or GRPOTrainer
    return cls(model=model_path, reward_funcs=[reward_answered, reward_short], args=args,
               train_dataset=Dataset.from_dict({"prompt": [PROMPT] * 32}),
               processing_class=PreTrainedTokenizerFast.from_pretrained(model_path), tools=TOOLS)
