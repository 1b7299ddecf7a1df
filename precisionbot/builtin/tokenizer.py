"""Byte-level tokenizer: ids 0..255 are bytes, then BOS and EOS. Any text encodes; nothing is unknown.

The default vocabulary of both presets; ``--vocab bpe-4096`` picks the subword one of bpe.py. Both are a ``Vocab``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from precisionbot.builtin.bpe import load_bpe

BOS_ID = 256
EOS_ID = 257
VOCAB_SIZE = 258


def encode(text: str, *, add_bos: bool = True) -> list[int]:
    """UTF-8 bytes of ``text``, after BOS (as SGLang's tokenizers add it to ``text`` prompts)."""
    ids = list(text.encode("utf-8"))
    return [BOS_ID, *ids] if add_bos else ids


def decode(ids: Sequence[int]) -> str:
    """The text of ``ids``; special tokens are skipped and broken UTF-8 shows as U+FFFD (like skip_special_tokens)."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def token_text(token_id: int) -> str:
    """One token's text as a logprob entry shows it: ASCII as itself, other bytes as ``<0xNN>`` (sentencepiece)."""
    if token_id == BOS_ID:
        return "<s>"
    if token_id == EOS_ID:
        return "</s>"
    if token_id < 0x80:
        return chr(token_id)
    return f"<0x{token_id:02X}>"


class Vocab(Protocol):
    """A builtin engine vocabulary: the byte tokenizer above (``byte``) or the subword one (``bpe-4096``, bpe.py)."""

    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    def encode(self, text: str, *, add_bos: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def token_text(self, token_id: int) -> str: ...


@dataclass(frozen=True)
class ByteVocab:
    """The 258-entry byte vocabulary as a ``Vocab``."""

    name: str = "byte"
    size: int = VOCAB_SIZE
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        return encode(text, add_bos=add_bos)

    def decode(self, ids: Sequence[int]) -> str:
        return decode(ids)

    def token_text(self, token_id: int) -> str:
        return token_text(token_id)


BYTE_VOCAB = ByteVocab()


def vocab_for(name: str) -> Vocab:
    """The vocabulary called ``name`` (``EngineOptions.vocab``): ``byte`` or ``bpe-4096`` (subwords)."""
    if name == "bpe-4096":
        return load_bpe()
    return BYTE_VOCAB
