"""Write a tiny random Hugging Face model directory that vLLM can serve (run with the vLLM venv's Python).

    python make_tiny_hf.py ARCH OUT_DIR TEXT_FILE...

ARCH is ``llama`` (dense, fp32), ``mistral-swa`` (every layer a 64-token sliding window, fp32) or
``qwen3-next`` (gated delta-net linear attention + gated full attention + MoE, bf16: vLLM's CPU delta-net
kernel needs bf16 and head dims of 64). The tokenizer is a byte-level BPE trained on the given local text
files, so nothing comes from the hub. Weights are random but seeded, with a wide init so that the model's
distributions are peaked (a near-uniform model would hide precision differences in its flat logits).

Stand-alone on purpose: it runs in vLLM's own environment (transformers, tokenizers, torch), not
precisionbot's.
"""

from __future__ import annotations

import sys
from pathlib import Path

VOCAB = 512
SEED = 1234


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
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common, dtype="float32")
    if arch == "mistral-swa":
        from transformers import MistralConfig

        return MistralConfig(**common, sliding_window=64, dtype="float32")
    if arch == "qwen3-next":
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
    raise SystemExit(f"unknown ARCH {arch!r}: use llama, mistral-swa or qwen3-next")


def main(argv: list[str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    arch, out, files = argv[0], Path(argv[1]), argv[2:]
    texts = [Path(f).read_text(encoding="utf-8") for f in files]
    torch.manual_seed(SEED)
    cfg = config(arch)
    model = AutoModelForCausalLM.from_config(cfg)
    dtype = torch.bfloat16 if arch == "qwen3-next" else torch.float32
    model = model.to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer(texts, out)


if __name__ == "__main__":
    main(sys.argv[1:])
