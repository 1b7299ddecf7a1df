"""The builtin engine's numerics and model flags, shared by every command that starts it (serve, check,
baseline record, demo, calibrate). Imports without torch."""

from __future__ import annotations

import argparse
from typing import Any

from precisionbot.builtin.options import PRESETS, VOCABS


def add_engine_flags(parser: Any) -> None:
    """``--enable-deterministic-inference`` (SGLang's flag name) and ``--model-preset``."""
    parser.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="builtin engine: bit-exact paths (prefill = decode = any batch), as SGLang's flag; default: "
        "production numerics (prefill and decode take different kernels, a clean match k3 is small, not 0)",
    )
    parser.add_argument(
        "--model-preset",
        choices=tuple(PRESETS),
        default=None,
        help="builtin engine model: hybrid (default: full + sliding-window attention + a gated-delta recurrent "
        "layer), tiny (two dense layers, fast) or hybrid-moe (hybrid with mixture-of-experts MLPs in layers 0 and 2, "
        "returning routed experts as SGLang's --enable-return-routed-experts)",
    )
    parser.add_argument(
        "--vocab",
        choices=VOCABS,
        default=None,
        help="builtin engine vocabulary: bpe-4096 (the hybrid preset's default: a byte-level BPE of 4096 "
        "subwords trained on the builtin text, cached in ~/.cache/precisionbot) or byte (258 tokens, tiny's)",
    )


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``EngineOptions`` keyword arguments from the flags (commands without them get the defaults)."""
    return {
        "enable_deterministic_inference": bool(getattr(args, "enable_deterministic_inference", False)),
        "preset": getattr(args, "model_preset", None) or "hybrid",
        "vocab": getattr(args, "vocab", None),
    }


def given(args: argparse.Namespace) -> bool:
    """Whether any of these flags was given (they only make sense with the builtin engine)."""
    return bool(
        getattr(args, "enable_deterministic_inference", False)
        or getattr(args, "model_preset", None)
        or getattr(args, "vocab", None)
    )
