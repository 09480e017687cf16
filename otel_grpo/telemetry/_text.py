"""Text as OTLP and the spill can carry it: valid Unicode, with U+FFFD in place of what is not.

    valid_text("abc\udc80")        # -> "abc\ufffd"
    valid_text("\ud83d\ude00")     # -> "\U0001f600": a surrogate pair, joined

Python text can hold lone surrogates: bytes decoded with `errors="surrogateescape"` (what a tokenizer's bad
decode or `os.environ` may hand over) keep each undecodable byte as one. UTF-8 cannot encode them: protobuf
refuses the span that holds one (and the whole export batch with it) and the spill its line. So every text
of ours that may hold them (a sample row's keys and values, a phase name, an exception's text) goes through
here first, once, and the export, the spill and `otel-grpo replay` of the spill carry the same text: each
lone surrogate replaced by U+FFFD, as a UTF-8 decoder replaces a byte it cannot read.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text`, each lone surrogate replaced by U+FFFD (two halves of a pair in a row: the character they name)."""
    if text.isascii() or _SURROGATE.search(text) is None:  # isascii: O(1) for Python's str, the usual case
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
