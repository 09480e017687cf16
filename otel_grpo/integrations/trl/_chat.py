"""TRL's prompts and completions as sample-table text: the one renderer of `instrument` and `follow --trl-output`.

    >>> chat_text([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}])
    'user: [image] What is it?'

TRL hands a reward function (and logs to its completions parquet) either plain strings or
conversations: lists of `{"role", "content"}` messages whose content is a string or a list
of parts (`{"type": "text", "text": ...}`, `{"type": "image", ...}`). The parquet round trip
turns parts into structs holding every field of every part (`"text": None` on an image), so
a part is rendered from its type and text only: the same text from both paths.
"""

from __future__ import annotations

from typing import Any


def chat_text(value: Any) -> str | None:
    """`role: content` lines for a conversation, a string as is, None (no value) as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):  # one message
        value = [value]
    if isinstance(value, (list, tuple)):
        return "\n".join(_message(m) for m in value)
    return str(value)


def _message(message: Any) -> str:
    if not isinstance(message, dict):
        return str(message)
    content = message.get("content")
    if isinstance(content, (list, tuple)):
        content = " ".join(_part(p) for p in content)
    return f"{message.get('role') or ''}: {'' if content is None else content}"


def _part(part: Any) -> str:
    """A content part: its text, or `[<type>]` for one without text (an image TRL stripped for logging)."""
    if not isinstance(part, dict):
        return str(part)
    text = part.get("text")
    return text if isinstance(text, str) else f"[{part.get('type') or 'part'}]"
