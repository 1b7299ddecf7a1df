"""Engine options and the fault catalogue (docs/builtin-engine.md).

Options are launch arguments, like an SGLang server's: they are reported by ``/server_info`` and two engines
with different options are different engines (a baseline signature includes them).
"""

from __future__ import annotations

from dataclasses import dataclass

from precisionbot.errors import ConfigError

FAULT_NAMES: tuple[str, ...] = (
    "restore-layer0-only",
    "restore-stale-page",
    "cache-decode-kv-rounded",
    "attn-p-fp8",
    "attn-p-fp8-scaled",
    "attn-p-bf16",
    "mantissa",
    "chunk-boundary",
    "batch-variant",
    "nondeterministic",
    "mamba-stale-checkpoint",
    "conv-state-shift",
    "swa-early-evict",
    "swa-decode-window",
    "state-mantissa",
    "state-bf16-decode",
    "mlp-bf16",
    "cross-node-bf16",
    "cross-node-stale",
    "spec-verify-offbyone",
    "spec-kv-rollback",
    "spec-state-rollback",
    "spec-bonus-logprob",
    "spec-accept-loose",
    "spec-draft-degraded",
    "spec-greedy-at-temperature",
    "router-fp8",
)
"""Every fault name, in the order of docs/builtin-engine.md's table. ``mantissa``, ``state-mantissa`` and
``mlp-bf16`` take a value (``=N``: mantissa bits, or the layer whose MLP runs in lower precision)."""

HYBRID_ONLY_FAULTS = (
    "mamba-stale-checkpoint",
    "conv-state-shift",
    "swa-early-evict",
    "swa-decode-window",
    "state-mantissa",
    "state-bf16-decode",
    "spec-state-rollback",
)
"""Faults of the recurrent and sliding-window layers: the ``tiny`` preset has neither, so it refuses them."""

SPEC_FAULTS = tuple(name for name in FAULT_NAMES if name.startswith("spec-"))
"""Faults of the speculative path (speculative.py). One switches speculation on (NGRAM, or STANDALONE for
``spec-bonus-logprob``, whose bug needs a draft distribution) when ``speculative_algorithm`` is unset."""

SPEC_ALGORITHMS = ("NGRAM", "STANDALONE")
"""``speculative_algorithm`` values (SGLang's names): an n-gram proposer over the request's own tokens, or a
draft model (the target's first layer sharing its embeddings, like an MTP head)."""

MULTI_NODE_FAULTS = ("cross-node-bf16", "cross-node-stale")
"""Faults of the cross-node all-reduce (tensor_parallel.py): a one-node engine has none, so it refuses them."""

PRESETS: dict[str, tuple[str, ...]] = {
    "hybrid": ("full", "gdn", "swa"),
    "tiny": ("full", "full"),
    "hybrid-moe": ("full", "gdn", "swa"),
}
"""Layer kinds per model preset. ``hybrid`` (the default) mixes full attention, a gated-delta recurrent layer
and sliding-window attention, like Qwen3-Next / Kimi-Linear style hybrids; ``tiny`` is the two dense
layers the fast unit tests use where the hybrid layers are not the point."""

DETECTION_FLOORS: dict[str, tuple[str, int]] = {
    "cache-decode-kv-rounded": ("decode_cache_hit", 256),
}
"""Fault -> (the check that exists to catch it, the fewest new tokens at which it did) on the hybrid preset under
production numerics, where a size matters (``calibrate --grid``; docs/builtin-engine.md, detection floors):
``check`` warns when a suite is below one. ``cache-decode-kv-rounded``'s error is in the decode-written KV a
turn 2 reuses up to its last 64-token checkpoint, so it grows with the tokens generated."""

VOCABS = ("byte", "bpe-4096")
"""Vocabularies (``EngineOptions.vocab``): the 258-entry byte tokenizer or the 4096-token byte-level BPE
(bpe.py) whose realistic tail exercises golden's top-k + rest KL."""
PRESET_VOCABS = {"hybrid": "bpe-4096", "tiny": "byte", "hybrid-moe": "bpe-4096"}
MOE_LAYERS = {"hybrid-moe": (0, 2)}
"""Layers whose MLP is a mixture of experts (moe.py), per preset; every other layer keeps its dense MLP. The
``hybrid-moe`` preset is ``hybrid`` with MoE MLPs in its full and sliding-window layers (the recurrent layer
stays dense, so the routed-experts array shows how a dense layer reads); other presets have none, so their
weights and numbers are unchanged."""
"""Each preset's vocabulary unless ``vocab`` says otherwise: the fast unit tests keep bytes."""

_VALUED = {"mantissa": (1, 23), "state-mantissa": (1, 23), "mlp-bf16": (0, 63), "router-fp8": (0, 63)}
"""Faults that need ``=VALUE``, with the inclusive integer range of the value."""

DTYPES = ("bfloat16", "float32")


@dataclass(frozen=True)
class Fault:
    """One switched-on fault."""

    name: str
    """A member of ``FAULT_NAMES``."""
    value: int | None = None
    """The ``=VALUE`` part (mantissa bits for ``mantissa``), else None."""

    def spec(self) -> str:
        """The ``NAME[=VALUE]`` text that ``parse_fault`` reads back."""
        return self.name if self.value is None else f"{self.name}={self.value}"


def parse_fault(spec: str) -> Fault:
    """Parse ``NAME`` or ``NAME=VALUE``; an unknown name or a bad value raises ``ConfigError``."""
    name, sep, raw = spec.strip().partition("=")
    name = name.strip()
    if name not in FAULT_NAMES:
        raise ConfigError(
            f"unknown fault {spec!r}; valid faults: {', '.join(FAULT_NAMES)} "
            "(mantissa, state-mantissa, mlp-bf16 and router-fp8 take =N)"
        )
    bounds = _VALUED.get(name)
    if bounds is None:
        if sep:
            raise ConfigError(f"fault {name!r} takes no value (got {spec!r}); write just --fault {name}")
        return Fault(name)
    low, high = bounds
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"fault {name!r} needs an integer value {low}..{high}, e.g. --fault {name}=5 (got {spec!r})"
        ) from None
    if not low <= value <= high:
        raise ConfigError(f"fault {name}={value}: the value must be between {low} and {high}")
    return Fault(name, value)


@dataclass(frozen=True)
class EngineOptions:
    """Launch arguments of the builtin engine. Every field has a default: ``EngineOptions()`` is the clean engine."""

    preset: str = "hybrid"
    """Model preset (``PRESETS``): ``hybrid`` (default), ``tiny`` (two dense layers, for fast unit tests) or
    ``hybrid-moe`` (hybrid with mixture-of-experts MLPs, ``MOE_LAYERS``)."""
    enable_deterministic_inference: bool = False
    """SGLang's flag: every path bit-identical (prefill = decode = any batch). Off (the default), prefill and
    decode take different kernels as on a GPU (numerics_production.py), so a clean ``match`` k3 is small but
    not zero."""
    sliding_window_size: int = 256
    """Keys a sliding-window layer sees (the query's own position included)."""
    mamba_track_interval: int = 64
    """Tokens between recurrent-state checkpoints kept with the prefix cache (SGLang's name and default)."""
    swa_full_tokens_ratio: float = 0.8
    """SGLang's name and default: the sliding-window layers' own KV pool holds this fraction of
    ``kv_pool_tokens`` (swa_cache.py); running requests free its pages once they fall out of the window."""
    disable_hybrid_swa_memory: bool = False
    """SGLang's flag: the sliding-window layers keep every token in the full-attention pool (one pool, no
    out-of-window freeing, no SWA tombstones)."""
    seed: int = 0
    """Seeds the weights (with the corpus statistics) and, unless a request brings its own, sampling."""
    page_size: int = 16
    """Tokens per KV page; the prefix cache matches whole pages."""
    chunked_prefill_size: int = 512
    """Most prompt tokens one prefill step computes (summed over the requests in that step)."""
    disable_radix_cache: bool = False
    """No prefix reuse at all (every request reports ``cached_tokens`` 0)."""
    faults: tuple[Fault, ...] = ()
    vocab: str | None = None
    """Vocabulary (``VOCABS``): ``byte`` (258 tokens) or ``bpe-4096`` (subwords with byte fallback, bpe.py);
    None = the preset's (``PRESET_VOCABS``). ``vocab_name`` is the one in use."""
    """Switched-on faults (several at once allowed)."""
    dtype: str = "bfloat16"
    """Activation and KV-cache dtype, ``bfloat16`` (default, like production engines) or ``float32``."""
    device: str | None = None
    """torch device; None picks ``cuda`` when available, else ``cpu``."""
    max_context_tokens: int = 16384
    """Longest prompt + new tokens one request may have."""
    kv_pool_tokens: int = 262144
    """KV slots in the paged pool (running requests plus the prefix cache, which evicts LRU pages)."""
    max_running_requests: int = 64
    """Requests decoded together at most; more wait in the queue."""
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    mlp_hidden: int = 256
    speculative_algorithm: str | None = None
    """SGLang's ``--speculative-algorithm`` (``SPEC_ALGORITHMS``): decode proposes drafts and verifies them in one
    extend (speculative.py); None: plain decode (unless a spec fault is on, ``spec_algorithm``)."""
    speculative_num_draft_tokens: int = 4
    """SGLang's ``--speculative-num-draft-tokens``: tokens one verify extend scores, the last accepted token
    included (so ``- 1`` drafts per step)."""
    nnodes: int = 1
    """Nodes the engine runs on (``serve --nnodes``): each layer's MLP is split over them (tensor_parallel.py).
    Part of the options, so every rank checks that it builds the same engine as rank 0."""

    def __post_init__(self) -> None:
        if self.page_size < 1 or self.page_size > 1024:
            raise ConfigError(f"page_size must be 1..1024 (got {self.page_size})")
        if self.chunked_prefill_size < 1:
            raise ConfigError(f"chunked_prefill_size must be >= 1 (got {self.chunked_prefill_size})")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)} (got {self.dtype!r})")
        if self.max_context_tokens < 8192:
            raise ConfigError(f"max_context_tokens must be >= 8192 (got {self.max_context_tokens})")
        if self.kv_pool_tokens < 2 * self.max_context_tokens:
            raise ConfigError(
                f"kv_pool_tokens ({self.kv_pool_tokens}) must be at least 2 x max_context_tokens "
                f"({self.max_context_tokens})"
            )
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.head_dim % 2 or self.n_layers < 1 or self.max_running_requests < 1:
            raise ConfigError("head_dim must be even, n_layers and max_running_requests >= 1")
        if self.preset not in PRESETS:
            raise ConfigError(f"preset must be one of {', '.join(PRESETS)} (got {self.preset!r})")
        if self.vocab is not None and self.vocab not in VOCABS:
            raise ConfigError(f"vocab must be one of {', '.join(VOCABS)} (got {self.vocab!r})")
        if self.sliding_window_size < 2 or self.mamba_track_interval < 1:
            raise ConfigError("sliding_window_size must be >= 2 and mamba_track_interval >= 1")
        if self.mamba_track_interval % self.page_size:
            raise ConfigError(
                f"mamba_track_interval ({self.mamba_track_interval}) must be a multiple of page_size "
                f"({self.page_size}): checkpoints live on page boundaries of the prefix cache"
            )
        if self.uses_swa_pool:
            self._check_swa_pool()
        elif self.has_fault("swa-early-evict") and self.preset != "tiny":
            raise ConfigError("fault swa-early-evict lives in the SWA pool: drop --disable-hybrid-swa-memory")
        names = [f.name for f in self.faults]
        misplaced = [n for n in names if n in HYBRID_ONLY_FAULTS and self.preset == "tiny"]
        if misplaced:
            raise ConfigError(
                f"fault(s) {', '.join(misplaced)} need the hybrid preset's recurrent/sliding-window layers; "
                "drop --model-preset tiny"
            )
        mlp_layer = self.fault_value("mlp-bf16")
        if mlp_layer is not None and mlp_layer >= len(self.layer_kinds):
            raise ConfigError(
                f"fault mlp-bf16={mlp_layer}: the model has layers 0..{len(self.layer_kinds) - 1}; pick one of them"
            )
        router_layer = self.fault_value("router-fp8")
        if router_layer is not None and router_layer not in self.moe_layers:
            where = ", ".join(map(str, self.moe_layers)) or "none: serve --model-preset hybrid-moe"
            raise ConfigError(
                f"fault router-fp8={router_layer}: layer {router_layer} has no router (MoE layers: {where})"
            )
        if self.moe_layers and self.nnodes > 1:
            raise ConfigError("the MoE preset runs on a one-node builtin engine: drop --nnodes")
        if not 1 <= self.nnodes <= self.mlp_hidden:
            raise ConfigError(f"nnodes must be 1..{self.mlp_hidden} (the MLP's intermediate size; got {self.nnodes})")
        lonely = [n for n in names if n in MULTI_NODE_FAULTS and self.nnodes < 2]
        if lonely:
            raise ConfigError(
                f"fault(s) {', '.join(lonely)} live in the cross-node all-reduce and need a multi-node engine: "
                "serve with --nnodes 2 (or more) --node-rank R --dist-init-addr HOST:PORT on each node"
            )
        self._check_speculative(names)
        if len(set(names)) != len(names):
            raise ConfigError(f"a fault is given twice: {', '.join(f.spec() for f in self.faults)}")

    def _check_speculative(self, names: list[str]) -> None:
        algorithm = self.speculative_algorithm
        if algorithm is not None and algorithm not in SPEC_ALGORITHMS:
            raise ConfigError(f"speculative_algorithm must be one of {', '.join(SPEC_ALGORITHMS)} (got {algorithm!r})")
        if not 2 <= self.speculative_num_draft_tokens <= 16:
            raise ConfigError(
                f"speculative_num_draft_tokens must be 2..16 (the verified token plus 1..15 drafts; got "
                f"{self.speculative_num_draft_tokens})"
            )
        if algorithm == "NGRAM" and "spec-bonus-logprob" in names:
            raise ConfigError(
                "fault spec-bonus-logprob takes the bonus token's logprob from the draft model, which NGRAM has "
                "not: use speculative_algorithm STANDALONE"
            )
        if self.nnodes > 1 and self.spec_algorithm is not None:
            raise ConfigError("speculative decoding runs on a one-node builtin engine: drop --nnodes")

    @property
    def spec_algorithm(self) -> str | None:
        """The speculative algorithm in use: ``speculative_algorithm``, else the one a spec fault needs."""
        if self.speculative_algorithm is not None:
            return self.speculative_algorithm
        if self.has_fault("spec-bonus-logprob"):
            return "STANDALONE"
        return "NGRAM" if any(f.name in SPEC_FAULTS for f in self.faults) else None

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """Layers with a mixture-of-experts MLP (``MOE_LAYERS``; none for the dense presets)."""
        return MOE_LAYERS.get(self.preset, ())

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """``full``, ``swa`` or ``gdn`` per layer (``tiny`` has ``n_layers`` full-attention layers)."""
        return ("full",) * self.n_layers if self.preset == "tiny" else PRESETS[self.preset]

    def _check_swa_pool(self) -> None:
        if not 0.0 < self.swa_full_tokens_ratio <= 1.0:
            raise ConfigError(f"swa_full_tokens_ratio must be in (0, 1] (got {self.swa_full_tokens_ratio})")
        need = self.swa_request_pages + 1
        have = self.swa_pool_tokens // self.page_size
        if have < need:
            raise ConfigError(
                f"the SWA KV pool ({have} pages = swa_full_tokens_ratio {self.swa_full_tokens_ratio} x "
                f"kv_pool_tokens {self.kv_pool_tokens} / page_size {self.page_size}) cannot hold one request's "
                f"window plus a prefill chunk ({need} pages): raise swa_full_tokens_ratio or kv_pool_tokens, "
                "or lower chunked_prefill_size"
            )

    @property
    def uses_swa_pool(self) -> bool:
        """Sliding-window layers keep their KV in their own, window-trimmed pool (swa_cache.py)."""
        return "swa" in self.layer_kinds and not self.disable_hybrid_swa_memory

    @property
    def swa_pool_tokens(self) -> int:
        """KV slots of the SWA pool (``swa_full_tokens_ratio x kv_pool_tokens``, whole pages)."""
        return int(self.swa_full_tokens_ratio * self.kv_pool_tokens) // self.page_size * self.page_size

    @property
    def swa_request_pages(self) -> int:
        """Most SWA pages one running request owns at once: its window, one spare page (freeing is
        page-aligned and lags a page, as SGLang's), the tokens since its last checkpoint (kept so a next turn
        can resume there) and a prefill chunk, each rounded up."""
        ps = self.page_size
        window = -(-self.sliding_window_size // ps) + 1 + -(-self.mamba_track_interval // ps)
        return window + -(-self.chunked_prefill_size // ps) + 2

    @property
    def vocab_name(self) -> str:
        return self.vocab or PRESET_VOCABS[self.preset]

    @property
    def is_hybrid(self) -> bool:
        return "gdn" in self.layer_kinds

    def has_fault(self, name: str) -> bool:
        return any(f.name == name for f in self.faults)

    def fault_value(self, name: str) -> int | None:
        for fault in self.faults:
            if fault.name == name:
                return fault.value
        return None

    def fault_specs(self) -> list[str]:
        return [f.spec() for f in self.faults]
