"""The subword vocabulary (``--vocab bpe-4096``): a byte-level BPE trained on the builtin training text.

Why: with 258 byte tokens the top-20 logprobs hold nearly all the mass, so golden's "top-k + rest" KL and the
tail rules are barely exercised; real engines serve vocabularies of tens of thousands of subwords. A byte-level
BPE (Hugging Face ``tokenizers``, GPT-2 style) has the 256 bytes as base tokens, so any text encodes (byte
fallback) and nothing is unknown. Training is deterministic (same text, size and library version give the same
merges) and takes about half a second; the result is cached on disk under a key of the training text's hash, the
vocabulary size and the library version, and in memory per process.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from precisionbot import envvars
from precisionbot.builtin.training_text import training_digest, training_documents

BPE_VOCAB_SIZE = 4096
"""Subword tokens including the 256 byte tokens and the two special tokens."""
BOS_TEXT, EOS_TEXT = "<s>", "</s>"
FORMAT = 1
"""Bumped when the training recipe below changes, so stale cache files are not reused."""


def cache_dir() -> Path:
    """``$PRECISIONBOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/precisionbot``, else ``~/.cache/precisionbot``."""
    explicit = os.environ.get(envvars.CACHE_DIR)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "precisionbot"


class BpeVocab:
    """A trained byte-level BPE as a ``Vocab`` (tokenizer.py). Token ids 0 and 1 are BOS and EOS."""

    def __init__(self, serialized: str) -> None:

        self.serialized = serialized
        self._tok = Tokenizer.from_str(serialized)
        self.size = self._tok.get_vocab_size()
        bos, eos = self._tok.token_to_id(BOS_TEXT), self._tok.token_to_id(EOS_TEXT)
        assert bos is not None and eos is not None, "the trained BPE lacks its special tokens"
        self.bos_id, self.eos_id = bos, eos
        self.name = f"bpe-{self.size}"
        # A logprob entry's text is the token decoded alone, as SGLang's return_text_in_logprobs does: a token
        # that is part of a multi-byte character shows as U+FFFD.
        self._texts = [self._tok.decode([i], skip_special_tokens=False) for i in range(self.size)]

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def token_text(self, token_id: int) -> str:
        return self._texts[token_id]


def train_bpe(vocab_size: int = BPE_VOCAB_SIZE) -> str:
    """Train the BPE on the training text; returns the tokenizer's JSON. Deterministic."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: byte fallback for any text
        special_tokens=[BOS_TEXT, EOS_TEXT],
    )
    docs = [d.decode("utf-8", errors="replace") for d in training_documents()]
    tok.train_from_iterator(docs, trainer=trainer)
    return str(tok.to_str())


def cache_key(vocab_size: int = BPE_VOCAB_SIZE) -> str:
    raw = f"{FORMAT}|{vocab_size}|{tokenizers.__version__}|{training_digest()}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


_LOADED: dict[int, BpeVocab] = {}


def load_bpe(vocab_size: int = BPE_VOCAB_SIZE) -> BpeVocab:
    """The cached vocabulary (memory, then disk), trained and stored on first use."""
    if vocab_size in _LOADED:
        return _LOADED[vocab_size]
    path = cache_dir() / f"tokenizer-bpe{vocab_size}-{cache_key(vocab_size)}.json"
    serialized = None
    try:
        serialized = path.read_text(encoding="utf-8")
        vocab = BpeVocab(serialized)
    except Exception:
        serialized = train_bpe(vocab_size)
        vocab = BpeVocab(serialized)
        _store(path, serialized)
    _LOADED[vocab_size] = vocab
    return vocab


def _store(path: Path, serialized: str) -> None:
    """Atomic write (a concurrent engine never reads half a file); an unwritable cache is only slower."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tokenizer-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(serialized)
        os.replace(tmp, path)
    except OSError:
        pass
