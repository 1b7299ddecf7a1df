"""The default corpus (no download) and user JSONL: deterministic prompts of the drawn token lengths."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from precisionbot import corpus
from precisionbot.errors import DataError


def byte_tokenize(texts: Sequence[str]) -> list[tuple[int, ...]]:
    """A stand-in engine tokenizer: BOS + UTF-8 bytes."""
    return [(1, *t.encode("utf-8")) for t in texts]


def word_tokenize(texts: Sequence[str]) -> list[tuple[int, ...]]:
    """Roughly 5 characters per token, like a BPE tokenizer on prose."""
    return [(1, *(hash(w) % 1000 + 2 for w in t.split())) for t in texts]


def test_builtin_corpus_has_prose_and_code() -> None:
    docs = corpus.builtin_documents()
    kinds = {d.kind for d in docs}
    assert kinds == {"prose", "code"}
    assert sum(len(d.text or "") for d in docs) > 1_000_000  # deep enough for 32 x 4.6k-token prompts


@pytest.mark.parametrize("tokenize", [byte_tokenize, word_tokenize])
def test_prompts_have_the_drawn_lengths_and_are_deterministic(tokenize: corpus.Tokenize) -> None:
    docs = corpus.builtin_documents()
    a = corpus.build_prompts(tokenize, docs, 12, (300, 900), seed=3)
    b = corpus.build_prompts(tokenize, docs, 12, (300, 900), seed=3)
    c = corpus.build_prompts(tokenize, docs, 12, (300, 900), seed=4)
    assert a == b and a != c
    plans = corpus.plan_samples(12, (300, 900), 3, docs)
    assert [len(p) for p in a] == [p.tokens for p in plans]
    assert all(300 <= len(p) <= 900 for p in a)
    assert [docs[p.doc].kind for p in plans[:4]] == ["code", "prose", "code", "prose"]  # alternating
    assert corpus.prompts_digest(a) == corpus.prompts_digest(b) != corpus.prompts_digest(c)


def test_user_jsonl_text_and_ids(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    rows = [{"text": "hello world " * 50}, {"input_ids": list(range(2, 300))}, {"text": "more text " * 80}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    docs = corpus.load_jsonl(f)
    assert [d.kind for d in docs] == ["user"] * 3
    prompts = corpus.build_prompts(byte_tokenize, docs, 6, (40, 60), seed=0)
    assert all(40 <= len(p) <= 60 for p in prompts)
    plans = corpus.plan_samples(6, (40, 60), 0, docs)
    for prompt, plan in zip(prompts, plans, strict=True):
        if docs[plan.doc].input_ids is not None:
            assert prompt == tuple(range(2, 2 + plan.tokens))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 1: invalid JSON"),
        ('{"txt": "a"}', 'line 1: expected {"text": "..."} or {"input_ids": [...]}'),
        ('{"text": "a", "input_ids": [1]}', "exactly one"),
        ('{"text": ""}', "'text' must be a non-empty string"),
        ('{"input_ids": [1, -2]}', "'input_ids' must be a non-empty list of non-negative integers"),
        ("", "has no rows"),
    ],
)
def test_bad_jsonl_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(DataError) as info:
        corpus.load_jsonl(f)
    assert message in str(info.value) and "bad.jsonl" in str(info.value)


def test_missing_corpus_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read corpus"):
        corpus.load_jsonl(tmp_path / "nope.jsonl")
