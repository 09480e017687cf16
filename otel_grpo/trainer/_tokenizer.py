"""A character-level tokenizer of our own: digits, a few operators and special tokens."""

from __future__ import annotations

import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
_SPECIALS = (PAD, BOS, EOS)
_CHARS = "0123456789+=>,|"


class CharTokenizer:
    """Maps each character of `_CHARS` and each special token to one id.

        >>> tok = CharTokenizer()
        >>> tok.decode(tok.encode("12>"))
        '12>'
    """

    def __init__(self) -> None:
        self.itos: list[str] = list(_SPECIALS) + list(_CHARS)
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = (self.stoi[s] for s in _SPECIALS)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        ids = [self.stoi[c] for c in text]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: list[int] | torch.Tensor, *, stop_at_eos: bool = True) -> str:
        """Text of `ids`; special tokens are dropped, decoding stops at the first EOS."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i == self.eos_id and stop_at_eos:
                break
            if i >= len(_SPECIALS):
                out.append(self.itos[i])
        return "".join(out)
