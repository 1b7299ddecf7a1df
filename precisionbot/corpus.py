"""Prompts for the checks: a default corpus that needs no download, or the user's JSONL.

The default corpus is deep prose and code that every Python installation carries: the language reference's
topic texts (``pydoc_data.topics``) and the standard library's own sources. Samples alternate prose and code
and are drawn deterministically from a seed, so two runs (and a run and its baseline) use the same prompts.

Prompt lengths are in *tokens* of the engine under test, so text is tokenised by the engine itself (a pure
prefill; no tokenizer download): a short probe measures characters per token, then each sample takes enough
text and is cut to its drawn length.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from precisionbot.errors import DataError, EngineError
from precisionbot.untrusted import TooLarge, read_capped

Tokenize = Callable[[Sequence[str]], list[tuple[int, ...]]]
MIN_CODE_CHARS = 4000


@dataclass(frozen=True)
class Document:
    name: str
    kind: str
    """``prose`` or ``code`` (or ``user`` for JSONL rows)."""
    text: str | None = None
    input_ids: tuple[int, ...] | None = None


def builtin_documents(max_code_files: int = 200) -> list[Document]:
    """The default corpus in a fixed order: reference-manual topics, then stdlib modules (a fresh list of
    the documents read once per process: they come with the interpreter and do not change under it)."""
    return list(_builtin_documents(max_code_files))


@functools.cache
def _builtin_documents(max_code_files: int) -> tuple[Document, ...]:
    from pydoc_data.topics import topics

    docs = [Document(f"pydoc:{k}", "prose", text=topics[k]) for k in sorted(topics) if len(topics[k]) > 500]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    code = 0
    for p in files:
        if code >= max_code_files:
            break
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) >= MIN_CODE_CHARS:
            docs.append(Document(f"stdlib:{p.name}", "code", text=text))
            code += 1
    return tuple(docs)


def suite_documents(path: str | Path | None) -> list[Document]:
    """A suite's corpus: ``suites.<name>.corpus`` (JSONL) when set, else the builtin one."""
    return builtin_documents() if path is None else load_jsonl(path)


CORPUS_MAX_BYTES = 256 * 1024 * 1024
"""Largest corpus file read (a real one is a few MiB); ``/dev/zero`` or a mistaken dump is refused."""


def load_jsonl(path: str | Path) -> list[Document]:
    """Rows ``{"text": str}`` or ``{"input_ids": [int, ...]}``; any error names the file and line."""
    p = Path(path)
    try:
        if not p.is_file():
            raise DataError(
                f"cannot read corpus {p}: not a regular file (missing, a device or a directory); "
                "check suites.<name>.corpus"
            )
        raw = read_capped(p, CORPUS_MAX_BYTES)
        lines = raw.decode("utf-8").splitlines()
    except TooLarge:
        raise DataError(f"corpus {p} is larger than {CORPUS_MAX_BYTES // 2**20} MiB; use a smaller file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"cannot read corpus {p}: {exc}; check suites.<name>.corpus") from exc
    docs: list[Document] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"corpus {p} line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: invalid JSON ({exc.msg}); write one JSON object per line") from exc
        if not isinstance(row, dict) or ("text" in row) == ("input_ids" in row):
            raise DataError(f'{where}: expected {{"text": "..."}} or {{"input_ids": [...]}} (exactly one)')
        if "text" in row:
            if not isinstance(row["text"], str) or not row["text"]:
                raise DataError(f"{where}: 'text' must be a non-empty string")
            docs.append(Document(f"{p.name}:{n}", "user", text=row["text"]))
        else:
            ids = row["input_ids"]
            if (
                not isinstance(ids, list)
                or not ids
                or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)
            ):
                raise DataError(f"{where}: 'input_ids' must be a non-empty list of non-negative integers")
            docs.append(Document(f"{p.name}:{n}", "user", input_ids=tuple(ids)))
    if not docs:
        raise DataError(f"corpus {p} has no rows")
    return docs


@dataclass(frozen=True)
class SamplePlan:
    """Where one prompt comes from: a start document, a start fraction within it, and a length in tokens."""

    doc: int
    start_fraction: float
    tokens: int


def plan_samples(n: int, tokens: tuple[int, int], seed: int, documents: Sequence[Document]) -> list[SamplePlan]:
    """Deterministic draws; samples alternate prose and code when the corpus has both (pure)."""
    if n < 1:
        raise ValueError("plan_samples: need at least one sample")
    rng = np.random.default_rng([seed, 0x5EED])
    by_kind: dict[str, list[int]] = {}
    for i, d in enumerate(documents):
        by_kind.setdefault(d.kind, []).append(i)
    kinds = sorted(by_kind)
    lo, hi = tokens
    plans = []
    for i in range(n):
        pool = by_kind[kinds[i % len(kinds)]]
        plans.append(
            SamplePlan(
                doc=int(pool[int(rng.integers(len(pool)))]),
                start_fraction=float(rng.random()),
                tokens=int(rng.integers(lo, hi + 1)),
            )
        )
    return plans


def _text_from(documents: Sequence[Document], plan: SamplePlan, chars: int) -> str:
    """At least ``chars`` characters starting at a line boundary in the planned document, then following ones."""
    doc = documents[plan.doc]
    assert doc.text is not None
    text = doc.text
    start = int(plan.start_fraction * max(0, len(text) - chars))
    nl = text.find("\n", start)
    start = nl + 1 if 0 <= nl < len(text) - 1 and start > 0 else 0
    parts, have, j = [text[start:]], len(text) - start, plan.doc
    while have < chars:
        j = (j + 1) % len(documents)
        if j == plan.doc:
            break  # the whole corpus is shorter than asked
        nxt = documents[j].text
        if nxt is not None:
            parts.append(nxt)
            have += len(nxt) + 2
    return "\n\n".join(parts)[: chars + 1]


def _ids_from(documents: Sequence[Document], plan: SamplePlan) -> tuple[int, ...]:
    ids: list[int] = []
    j = plan.doc
    while len(ids) < plan.tokens:
        row = documents[j].input_ids
        if row is not None:
            ids.extend(row)
        j = (j + 1) % len(documents)
        if j == plan.doc:
            break
    return tuple(ids[: plan.tokens])


def build_prompts(
    tokenize: Tokenize, documents: Sequence[Document], n: int, tokens: tuple[int, int], seed: int
) -> list[tuple[int, ...]]:
    """``n`` prompts with lengths drawn from ``tokens`` (inclusive), tokenised by ``tokenize``."""
    plans = plan_samples(n, tokens, seed, documents)
    prompts: list[tuple[int, ...] | None] = [None] * n
    text_plans = [i for i, p in enumerate(plans) if documents[p.doc].text is not None]
    for i, p in enumerate(plans):
        if documents[p.doc].text is None:
            prompts[i] = _ids_from(documents, p)
    if text_plans:
        ratio = _chars_per_token(tokenize, documents, plans, text_plans)
        todo = text_plans
        for _attempt in range(4):
            texts = [_text_from(documents, plans[i], math.ceil(plans[i].tokens * ratio * 1.1) + 16) for i in todo]
            short = []
            for i, ids in zip(todo, tokenize(texts), strict=True):
                if len(ids) >= plans[i].tokens:
                    prompts[i] = ids[: plans[i].tokens]
                else:
                    prompts[i] = ids
                    short.append(i)
            if not short:
                break
            todo, ratio = short, ratio * 1.5
    out = [ids for ids in prompts if ids is not None]
    for i, ids in enumerate(out):
        if len(ids) < 2:
            raise DataError(f"prompt {i} has {len(ids)} token(s); the corpus rows are too short")
    return out


def _chars_per_token(
    tokenize: Tokenize, documents: Sequence[Document], plans: Sequence[SamplePlan], which: Sequence[int]
) -> float:
    """Characters per token of this engine's tokenizer, measured on a probe of the sampled documents."""
    probe_docs = sorted({plans[i].doc for i in which})[:4]
    texts = [(documents[d].text or "")[:2000] for d in probe_docs]
    counts = tokenize(texts)
    chars = sum(len(t) for t in texts)
    toks = sum(len(c) for c in counts)
    if toks == 0:
        # The same situation as a /tokenize answer without tokens: an engine problem (INCONCLUSIVE), not ours.
        raise EngineError(
            "the tokenizer gave no tokens for the corpus probe; check the engine's /tokenize (or engine.tokenizer), "
            "or choose the engine kind that matches the server"
        )
    return max(chars / toks, 0.5)


def prompts_digest(prompts: Sequence[Sequence[int]]) -> str:
    """A short hash of the exact prompt tokens (part of a baseline signature)."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(np.asarray(p, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]
