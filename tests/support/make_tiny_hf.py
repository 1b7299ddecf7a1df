"""Write a tiny random Hugging Face model directory that vLLM can serve (run with the vLLM venv's Python).

    python make_tiny_hf.py ARCH OUT_DIR TEXT_FILE...

ARCH is ``llama`` (dense, fp32), ``llama-bigram`` (the same with text-like weights, below) and
``llama-bigram-draft`` (``llama-bigram``'s first layer with its embeddings, final norm and unembedding, like an
MTP head: a draft model for vLLM's ``draft_model`` speculation that agrees with its target often, not always),
``mistral-swa`` (every layer a 64-token sliding window, fp32),
``qwen3-next`` (gated delta-net linear attention + gated full attention + MoE, bf16: vLLM's CPU delta-net
kernel needs bf16 and head dims of 64), ``qwen3-next-bigram`` (the same architecture with text-like
weights, below) or ``swa-hybrid-bigram`` (Llama layers alternating a 64-token sliding window and full attention
through ``layer_types``, as Gemma 3 and GPT-OSS interleave them, with the same text-like weights, bf16: vLLM
serves it with two KV cache groups, one of them a sliding-window pool). The tokenizer is a byte-level BPE
trained on the given local text files (the tests pass the builtin engine's fixed training text), so nothing
comes from the hub. Weights are random but seeded, with a wide init so that the model's distributions are peaked (a
near-uniform model would hide precision differences in its flat logits).

A random model's peaks are not a text's, though: its clean bf16 noise is that of no real model (the random
``qwen3-next`` fails ``match`` on a clean vLLM server). ``qwen3-next-bigram`` carries the builtin engine's
construction (precisionbot/builtin/weights.py) into the Hugging Face model: the subword bigram
log-probabilities of the same text files, sharpened, go into the embedding and unembedding as a low-rank factor
(rows of equal norm, so the final RMSNorm leaves each token's temperature alone), and the seeded layers' output
projections are scaled down so that the delta-net state, the attention KV and the experts move the logits by a
context-dependent part without flattening them, and the delta-net decays slowly enough that its state carries
context (the planted state bugs need a state that matters). No training loop: it is written in seconds.

Stand-alone on purpose: it runs in vLLM's own environment (transformers, tokenizers, torch), not
precisionbot's.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

VOCAB = 512
SEED = 1234
BIGRAM_RANK = 96
"""Rank of the bigram factor in the 128-wide residual stream (the rest is free for the layers' own part)."""
SHARPNESS = 1.8
"""Multiplies the bigram log-table: > 1 peaks the distributions (a 512-subword bigram is flatter than the builtin
engine's, which uses 1.4)."""
SMOOTHING = 6.0
"""Pseudo-counts spread by the unigram distribution, as the builtin engine smooths its subword bigram."""
LAYER_SCALE = 0.015
"""Multiplies the experts' output projections (routed and shared): with the two below, the context-dependent part
of the logits, large enough that a wrong state moves them by tenths of a nat, small enough to keep them peaked."""
RECURRENT_SCALE = 0.09
ATTENTION_SCALE = 0.04
"""The delta-net and attention layers' output projections instead: their state and KV are what a hybrid prefix
hit restores, so they get the larger share (with LAYER_SCALE the experts' part would hide a wrong KV block in
the bf16 noise)."""
DECAY_A_LOG, DECAY_DT_BIAS = math.log(0.5), -5.0
"""The delta-net's decay ``exp(-exp(A_log) * softplus(a + dt_bias))`` per token. Transformers' init (``A_log``
up to log 16, ``dt_bias`` 1) forgets the state within a few tokens, so a wrong restored state would vanish before
the first generated token (measured: KL 2e-9); these keep it for tens to hundreds of tokens, as a trained
model's slow heads do."""


def tokenizer(texts: list[str], out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)


def config(arch: str) -> object:
    common = dict(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=8192,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        initializer_range=0.25,
    )
    if arch in ("llama", "llama-bigram", "llama-bigram-draft"):
        from transformers import LlamaConfig

        return LlamaConfig(**common, dtype="float32")
    if arch == "mistral-swa":
        from transformers import MistralConfig

        return MistralConfig(**common, sliding_window=64, dtype="float32")
    if arch == "swa-hybrid-bigram":
        from transformers import LlamaConfig

        # vLLM's Llama reads ``layer_types`` and ``sliding_window`` per layer (Transformers' Llama keeps them as
        # plain attributes); 4 layers so that each kind has two.
        return LlamaConfig(
            **{**common, "num_hidden_layers": 4},
            layer_types=["sliding_attention", "full_attention"] * 2,
            sliding_window=64,
            dtype="bfloat16",
        )
    if arch in ("qwen3-next", "qwen3-next-bigram"):
        from transformers import Qwen3NextConfig

        return Qwen3NextConfig(
            **{**common, "num_hidden_layers": 4, "num_key_value_heads": 2},
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            linear_num_value_heads=2,
            linear_num_key_heads=2,
            linear_key_head_dim=64,
            linear_value_head_dim=64,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
            decoder_sparse_step=1,
            dtype="bfloat16",
        )
    raise SystemExit(
        f"unknown ARCH {arch!r}: use llama, llama-bigram, llama-bigram-draft, mistral-swa, qwen3-next, "
        "qwen3-next-bigram or swa-hybrid-bigram"
    )


def bigram_table(out: Path, texts: list[str]) -> object:
    """Row-centred log P(next | current) of the texts' subword bigrams, smoothed towards the unigram."""
    import torch
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(out)
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for text in texts:
        ids = torch.tensor(tok(text)["input_ids"], dtype=torch.long)
        counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64), accumulate=True)
    unigram = (counts.sum(0) + 1.0) / (counts.sum() + VOCAB)
    probs = (counts + SMOOTHING * unigram) / (counts.sum(1, keepdim=True) + SMOOTHING)
    table = probs.log() * SHARPNESS
    return table - table.mean(1, keepdim=True)


def carry_bigram(model: object, table: object) -> None:
    """Embedding rows = the table's left singular factor at equal norms; unembedding = the least-squares right
    factor for those rows; layer outputs scaled by LAYER_SCALE (see the module docstring)."""
    import torch

    assert isinstance(model, torch.nn.Module) and isinstance(table, torch.Tensor)
    hidden = model.config.hidden_size
    u, s, _ = torch.linalg.svd(table)
    left = u[:, :BIGRAM_RANK] * s[:BIGRAM_RANK].sqrt()
    # Equal norms (RMS 1 over the residual): the final RMSNorm then scales every token's logits alike.
    left = left / left.norm(dim=1, keepdim=True) * hidden**0.5
    right = torch.linalg.lstsq(left, table).solution.T  # [VOCAB, BIGRAM_RANK]
    gen = torch.Generator().manual_seed(SEED)
    embed = torch.zeros(VOCAB, hidden, dtype=torch.float64)
    embed[:, :BIGRAM_RANK] = left
    unembed = torch.randn(VOCAB, hidden, generator=gen, dtype=torch.float64) * 0.5
    unembed[:, :BIGRAM_RANK] = right
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(embed)
        model.get_output_embeddings().weight.copy_(unembed)
        for name, param in model.named_parameters():
            if name.endswith("linear_attn.out_proj.weight"):
                param.mul_(RECURRENT_SCALE)
            elif name.endswith("self_attn.o_proj.weight"):
                param.mul_(ATTENTION_SCALE)
            elif name.endswith(("o_proj.weight", "down_proj.weight", "down_proj")):
                param.mul_(LAYER_SCALE)
            elif name.endswith("A_log"):
                param.fill_(DECAY_A_LOG)
            elif name.endswith("dt_bias"):
                param.fill_(DECAY_DT_BIAS)


def main(argv: list[str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    arch, out, files = argv[0], Path(argv[1]), argv[2:]
    texts = [Path(f).read_text(encoding="utf-8") for f in files]
    torch.manual_seed(SEED)
    cfg = config(arch)
    model = AutoModelForCausalLM.from_config(cfg)
    if "-bigram" in arch:
        tokenizer(texts, out)  # the bigram table is counted in its subwords
        carry_bigram(model, bigram_table(out, texts))
    if arch.endswith("-draft"):
        # The same seeded target, cut to its first layer: the draft shares the target's every other weight.
        model.model.layers = model.model.layers[:1]
        model.config.num_hidden_layers = 1
    dtype = torch.bfloat16 if arch.startswith("qwen3-next") or arch == "swa-hybrid-bigram" else torch.float32
    model = model.to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer(texts, out)


if __name__ == "__main__":
    main(sys.argv[1:])
