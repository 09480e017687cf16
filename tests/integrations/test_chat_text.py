"""One chat renderer: `instrument`'s sample rows (TRL's objects in process) and `follow --trl-output`'s (the same
objects after TRL's completions parquet) give the same prompt and completion text."""

from __future__ import annotations

import pandas as pd
import pytest

from otel_grpo.integrations.follow import TrlOutput
from otel_grpo.integrations.trl._generation_rows import SampleBatch, sample_rows

pytest.importorskip("pyarrow")
from trl.trainer.utils import strip_images_from_messages  # noqa: E402 (what TRL applies before its parquet)

IMAGE = object()  # a PIL image in a real multimodal prompt: neither path can show it
CASES = {
    "plain": ("say red one", " red one"),
    "chat": ([{"role": "system", "content": "be brief"}, {"role": "user", "content": "say red one"}],
             [{"role": "assistant", "content": "red one"}]),
    "multimodal": ([{"role": "user", "content": [{"type": "image", "image": IMAGE},
                                                 {"type": "text", "text": "what is this?"}]}],
                   [{"role": "assistant", "content": [{"type": "text", "text": "a cat"}]}]),
}


def instrument_text(prompt, completion) -> tuple[str, str]:
    batch = SampleBatch([prompt], [completion], [1], [False], 0, 0)
    row = sample_rows(batch, ["fn"], 1)[0]
    return row["prompt"], row["completion"]


def follow_text(tmp_path, prompt, completion) -> tuple[str, str]:
    """As TRL 1.16's `GRPOTrainer.log` writes the completions table (pandas' to_parquet), read by the follower."""
    (tmp_path / "completions").mkdir()
    pd.DataFrame({"step": [1], "prompt": [strip_images_from_messages(prompt)],
                  "completion": [strip_images_from_messages(completion)], "fn": [0.0], "advantage": [0.0]}).to_parquet(
        tmp_path / "completions" / "completions_00001.parquet")
    source = TrlOutput(tmp_path)
    source.restore(None, from_start=True)
    [record] = source.poll(10)
    return record.rows[0]["prompt"], record.rows[0]["completion"]


@pytest.mark.parametrize("case", CASES)
def test_both_paths_render_the_same_text(tmp_path, case):
    prompt, completion = CASES[case]
    assert instrument_text(prompt, completion) == follow_text(tmp_path, prompt, completion)


def test_the_text_itself():
    assert instrument_text(*CASES["plain"]) == ("say red one", " red one")
    assert instrument_text(*CASES["chat"]) == ("system: be brief\nuser: say red one", "assistant: red one")
    assert instrument_text(*CASES["multimodal"]) == ("user: [image] what is this?", "assistant: a cat")
