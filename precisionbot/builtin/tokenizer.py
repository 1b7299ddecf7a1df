"""Byte-level tokenizer: ids 0..255 are bytes, then BOS and EOS. Any text encodes; nothing is unknown."""

from __future__ import annotations

from collections.abc import Sequence

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
