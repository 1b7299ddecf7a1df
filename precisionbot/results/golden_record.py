"""The numbers a golden run produces, and the layout they are stored in (one row per scored position).

A run is a list of samples: *prefill* samples (a corpus document teacher-forced as one prompt, every position
from 1 scored, so context depth = position) and *decode* samples (greedy generation from a prefix of a
prefill sample, every step scored). Rows are grouped by sample, in order. Per row: the scored token, its
logprob, and the top-k ids and logprobs (int32 / float32: 168 bytes a row at k = 20 before compression).

The context of a prefill sample is its own scored tokens (plus ``first_token``), and a decode prompt is a
prefix of a prefill sample, so no separate token stream is stored: a candidate replays the baseline's exact
token ids, whatever its tokenizer would do today.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

GOLDEN_ARRAYS = "golden"
"""The name of a golden run's arrays in the store (``golden.npz`` beside ``meta.json``)."""


@dataclass(frozen=True)
class GoldenSample:
    phase: str
    """``prefill`` or ``decode``."""
    doc: str
    """The corpus document's name."""
    kind: str
    """``prose`` or ``code``."""
    prompt_tokens: int
    """Prefill: the document length scored; decode: the prompt length before the first generated token."""
    first_position: int
    """Position (index in the full token sequence) of the sample's first row."""
    rows: int
    first_token: int = -1
    """Prefill: token 0 (it has no prediction, so it is not a row)."""
    source: int = -1
    """Decode: index of the prefill sample whose first ``prompt_tokens`` tokens are the prompt."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GoldenSample:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class GoldenRecord:
    samples: tuple[GoldenSample, ...]
    token_id: npt.NDArray[np.int32]
    """The scored token per row (the corpus token for prefill, the generated token for decode)."""
    lp: npt.NDArray[np.float32]
    """Its logprob (nats)."""
    top_ids: npt.NDArray[np.int32]
    top_lp: npt.NDArray[np.float32]

    def __post_init__(self) -> None:
        n = sum(s.rows for s in self.samples)
        if not (len(self.token_id) == len(self.lp) == self.top_ids.shape[0] == self.top_lp.shape[0] == n):
            raise ValueError(f"GoldenRecord arrays do not match its samples' {n} rows")
        if self.top_ids.shape != self.top_lp.shape or self.top_ids.ndim != 2:
            raise ValueError(f"GoldenRecord top-k arrays must be [N, k]; got {self.top_ids.shape}")

    @property
    def top_k(self) -> int:
        return int(self.top_ids.shape[1])

    def __len__(self) -> int:
        return len(self.token_id)

    def bounds(self) -> list[tuple[int, int]]:
        """Row range ``[start, stop)`` of each sample."""
        out, start = [], 0
        for s in self.samples:
            out.append((start, start + s.rows))
            start += s.rows
        return out

    def sample_index(self) -> npt.NDArray[np.int32]:
        return np.repeat(np.arange(len(self.samples), dtype=np.int32), [s.rows for s in self.samples])

    def positions(self) -> npt.NDArray[np.int32]:
        return np.concatenate(
            [np.arange(s.first_position, s.first_position + s.rows, dtype=np.int32) for s in self.samples]
            or [np.zeros(0, dtype=np.int32)]
        )

    def phase_mask(self, phase: str) -> npt.NDArray[np.bool_]:
        return np.repeat(np.array([s.phase == phase for s in self.samples], dtype=bool), [s.rows for s in self.samples])

    def prompt_ids(self, index: int) -> tuple[int, ...]:
        """The prompt to send for sample ``index`` (prefill: the whole document; decode: its prefix)."""
        s = self.samples[index]
        if s.phase == "prefill":
            start, stop = self.bounds()[index]
            return (s.first_token, *self.token_id[start:stop].tolist())
        full = self.prompt_ids(s.source)
        return full[: s.prompt_tokens]

    def to_arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {"token_id": self.token_id, "lp": self.lp, "top_ids": self.top_ids, "top_lp": self.top_lp}

    @classmethod
    def from_arrays(cls, samples: Sequence[Mapping[str, Any]], arrays: Mapping[str, npt.NDArray[Any]]) -> GoldenRecord:
        return cls(
            samples=tuple(GoldenSample.from_dict(s) for s in samples),
            token_id=np.asarray(arrays["token_id"], dtype=np.int32),
            lp=np.asarray(arrays["lp"], dtype=np.float32),
            top_ids=np.asarray(arrays["top_ids"], dtype=np.int32),
            top_lp=np.asarray(arrays["top_lp"], dtype=np.float32),
        )

    @staticmethod
    def build(samples: Sequence[GoldenSample], parts: Sequence[Mapping[str, npt.NDArray[Any]]]) -> GoldenRecord:
        """Concatenate per-sample row arrays (``token_id``, ``lp``, ``top_ids``, ``top_lp``)."""

        def cat(name: str, dtype: type) -> npt.NDArray[Any]:
            return np.concatenate([np.asarray(p[name], dtype=dtype) for p in parts])

        return GoldenRecord(
            samples=tuple(samples),
            token_id=cat("token_id", np.int32),
            lp=cat("lp", np.float32),
            top_ids=cat("top_ids", np.int32),
            top_lp=cat("top_lp", np.float32),
        )
