"""MoE routing agreement between two runs of the same tokens: per layer, how many tokens went to the same experts.

Input: two ``[tokens, layers x top_k]`` int arrays of routed expert ids (SGLang's ``routed_experts`` split into
tokens: ``engines.base.Generation.routed_experts``), position-aligned. For each layer ``l`` and token ``t`` with
expert sets ``A`` and ``B`` (the order inside a top-k does not matter: engines sort by weight, and two equal
weights may come out in either order):

* **exact** — the fraction of tokens with ``A == B``;
* **Jaccard** — the mean over tokens of ``|A ∩ B| / |A ∪ B|`` (1 when equal; with top-2, one expert of two
  swapped gives 1/3), which says how far a moved token moved.

A layer whose ids are all negative in both runs has no router (a dense layer: the builtin engine reports -1
there) and is left out. Example, top-2, one layer, three tokens ``[[0,1],[2,3],[4,5]]`` against
``[[1,0],[2,6],[4,5]]``: exact 2/3, Jaccard (1 + 1/3 + 1) / 3 = 0.778.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntMatrix = npt.NDArray[np.int32]

PATH_FLOOR = 0.95
"""Lowest exact agreement of decode vs prefill per layer. The clean builtin ``hybrid-moe`` engine under
production numerics agrees on 99.6 % of 16,352 generated tokens at layer 2 and on all of them at layer 0 at the
default sizes (32 x 512; benchmarks/RESULTS.md, routing), one flip in 31 tokens on a short run: its
decode kernels (split-K GEMMs, split-KV attention, the stepwise recurrence) move the router's input by bf16
ulps, enough to flip the tokens whose second and third logits nearly tie."""
BASELINE_FLOOR = 0.99
"""Lowest exact agreement of PR vs baseline per layer without main's reruns to judge by: both are prefills of
the same tokens, so a clean rebuild agrees on every token unless the engine is nondeterministic (a
nondeterministic engine needs a second producer: its own noise is then the floor). The builtin ``router-fp8``
fault keeps about 97 % (benchmarks/RESULTS.md, routing)."""


@dataclass(frozen=True)
class LayerAgreement:
    """One MoE layer's agreement over the compared tokens."""

    layer: int
    tokens: int
    exact: float
    """Fraction of tokens whose top-k expert set is the same in both runs."""
    jaccard: float
    """Mean per-token Jaccard index of the two expert sets."""
    moved: int
    """Tokens whose expert set differs (``tokens - exact x tokens``)."""

    def to_dict(self) -> dict[str, float | int]:
        return {"layer": self.layer, "tokens": self.tokens, "exact": self.exact, "jaccard": self.jaccard,
                "moved": self.moved}  # fmt: skip


def split_layers(routed: IntMatrix, top_k: int) -> npt.NDArray[np.int32]:
    """``[tokens, layers x top_k]`` as ``[tokens, layers, top_k]``; ``ValueError`` when the width is not a
    multiple of ``top_k``."""
    if top_k < 1 or routed.ndim != 2 or routed.shape[1] % top_k:
        raise ValueError(f"routed experts of shape {routed.shape} do not split into top-{top_k} rows per layer")
    return routed.reshape(routed.shape[0], routed.shape[1] // top_k, top_k)


def agreement(a: IntMatrix, b: IntMatrix, top_k: int) -> list[LayerAgreement]:
    """Per MoE layer, the agreement of ``a`` and ``b`` (same shape); dense layers (all ids < 0) left out."""
    if a.shape != b.shape:
        raise ValueError(f"routed experts of shapes {a.shape} and {b.shape} do not line up")
    x, y = np.sort(split_layers(a, top_k), axis=2), np.sort(split_layers(b, top_k), axis=2)
    out = []
    for layer in range(x.shape[1]):
        xa, ya = x[:, layer], y[:, layer]
        if xa.shape[0] == 0 or (np.all(xa < 0) and np.all(ya < 0)):
            continue
        same = np.all(xa == ya, axis=1)
        inter = (xa[:, :, None] == ya[:, None, :]).any(axis=2).sum(axis=1)  # ids are distinct within a row
        jac = inter / (2 * top_k - inter)
        out.append(
            LayerAgreement(
                layer=layer,
                tokens=int(xa.shape[0]),
                exact=float(same.mean()),
                jaccard=float(jac.mean()),
                moved=int((~same).sum()),
            )
        )
    return out


def pool(parts: list[list[LayerAgreement]]) -> list[LayerAgreement]:
    """Per layer, the agreement over the tokens of every part (token-weighted: several samples as one)."""
    by_layer: dict[int, list[LayerAgreement]] = {}
    for part in parts:
        for la in part:
            by_layer.setdefault(la.layer, []).append(la)
    out = []
    for layer in sorted(by_layer):
        items = by_layer[layer]
        n = sum(i.tokens for i in items)
        if n == 0:
            continue
        out.append(
            LayerAgreement(
                layer=layer,
                tokens=n,
                exact=sum(i.exact * i.tokens for i in items) / n,
                jaccard=sum(i.jaccard * i.tokens for i in items) / n,
                moved=sum(i.moved for i in items),
            )
        )
    return out


def noise_floor(main_exact: float, tokens: int, z: float = 3.0) -> float:
    """The lowest exact agreement still within main's noise: main's agreement ``main_exact`` less ``z`` binomial
    standard errors over ``tokens`` (at least one token's worth, so a main that agreed on every token still
    allows a rare tie to flip)."""
    n = max(tokens, 1)
    se = math.sqrt(main_exact * (1.0 - main_exact) / n)
    return main_exact - max(z * se, 1.0 / n)


def share(fraction: float) -> str:
    """A fraction of tokens as a percentage with one decimal, never rounded up to 100 % nor down to 0 %."""
    pct = 100.0 * fraction
    if 99.95 <= pct < 100.0:
        return "> 99.9 %"
    if 0.0 < pct < 0.05:
        return "< 0.1 %"
    return f"{pct:.1f} %"
