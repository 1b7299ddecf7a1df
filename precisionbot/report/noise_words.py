"""How large rounding noise is for the run's model, in words: "bf16 noise (~1e-3 nats)", "f32 noise (~1e-5 nats)".

Pure: reads the run's ``environment`` only. The report compares a difference with what two correct kernels
differ by; that scale follows the precision the model computes in, so a hard-coded "bf16" would misname an f32
or a quantized GGUF model. The precision comes from the config's ``models[].dtype`` when it names one, else from
the model file's name (GGUF files carry their type there by convention: ``model-Q4_0.gguf``).

The scales are orders of magnitude, not measurements: a logprob difference between two correct kernels is about
the format's relative rounding (bf16 keeps 8 significant bits, fp16 11, f32 24) times the size of the logits.
Quantized GGUF weights are dequantized and the activations requantized to 8 bits for the dot products, so their
kernel-to-kernel noise is of bf16's order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NoiseScale:
    label: str
    """``bf16``, ``f32``, ``Q4_0``; empty when the precision is unknown."""
    nats: float

    @property
    def words(self) -> str:
        """``bf16 noise (~1e-3 nats)``, or ``rounding noise (~1e-3 nats at bf16)`` when the precision is unknown."""
        if not self.label:
            return f"rounding noise (~{self.nats:.0e} nats at bf16)".replace("e-0", "e-")
        return f"{self.label} noise (~{self.nats:.0e} nats)".replace("e-0", "e-")


UNKNOWN = NoiseScale("", 1e-3)
_BY_DTYPE = {
    "bfloat16": NoiseScale("bf16", 1e-3),
    "bf16": NoiseScale("bf16", 1e-3),
    "float16": NoiseScale("fp16", 1e-4),
    "fp16": NoiseScale("fp16", 1e-4),
    "f16": NoiseScale("fp16", 1e-4),
    "half": NoiseScale("fp16", 1e-4),
    "float32": NoiseScale("f32", 1e-5),
    "fp32": NoiseScale("f32", 1e-5),
    "f32": NoiseScale("f32", 1e-5),
    "float": NoiseScale("f32", 1e-5),
}
_GGUF_TYPE = re.compile(r"(?i)(?:^|[-_.])(bf16|f16|f32|i?q[1-8]_(?:[0-9]|k(?:_[sml])?|xxs|xs|s|m|nl)+)\.gguf$")


def noise_scale(environment: Mapping[str, Any] | None) -> NoiseScale:
    """The run's precision and its noise scale; :data:`UNKNOWN` when neither the config nor the file name says."""
    env = environment or {}
    dtype = str(env.get("dtype") or "").strip().lower()
    if dtype in _BY_DTYPE:
        return _BY_DTYPE[dtype]
    path = str(env.get("model_path") or env.get("model") or "")
    m = _GGUF_TYPE.search(path.rsplit("/", 1)[-1])
    if m is None:
        return UNKNOWN
    kind = m.group(1)
    if kind.lower() in _BY_DTYPE:
        return _BY_DTYPE[kind.lower()]
    return NoiseScale(kind.upper(), 1e-3)
