"""A tiny llama GGUF, written deterministically with the ``gguf`` package, for the real llama-server tests.

The architecture is a real (small) llama: 2 layers, width 64, 4 query heads over 2 KV heads (GQA), SwiGLU,
RoPE, and the Llama-2 vocabulary copied from the ``ggml-vocab-llama-spm.gguf`` file llama.cpp ships. Weights
are drawn from a seeded numpy generator, so every machine serves the same numbers. The output rows of byte
tokens are shrunk, so greedy decoding rarely emits a lone UTF-8 byte (llama-server drops the logprob entry of a
token that leaves an incomplete character; the client handles it, but the clean run should not depend on it).
``quantize="q4_0"`` (or ``"q8_0"``) writes the same weights with the matrices quantised: the "deliberately
broken" build (Q8_0 stays within the golden KL limit on this model; Q4_0 does not).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX = 1024
SEED = 20261130
BYTE_TOKEN = 6  # llama.cpp's LLAMA_TOKEN_TYPE_BYTE


def write_tiny_llama(vocab_path: Path, out: Path, *, quantize: str | None = None) -> Path:
    import gguf

    reader = gguf.GGUFReader(str(vocab_path))

    def field(name: str) -> object:
        f = reader.fields[name]
        return f.contents()

    tokens = field("tokenizer.ggml.tokens")
    scores = field("tokenizer.ggml.scores")
    types = field("tokenizer.ggml.token_type")
    assert isinstance(tokens, list) and isinstance(scores, list) and isinstance(types, list)
    n_vocab = len(tokens)
    rng = np.random.default_rng(SEED)
    head_dim = N_EMBD // N_HEAD

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    tensors: dict[str, np.ndarray] = {"token_embd.weight": mat(n_vocab, N_EMBD, 1.0)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        tensors[p + "attn_q.weight"] = mat(N_EMBD, N_EMBD, 0.5 / np.sqrt(N_EMBD))
        tensors[p + "attn_k.weight"] = mat(N_HEAD_KV * head_dim, N_EMBD, 0.5 / np.sqrt(N_EMBD))
        tensors[p + "attn_v.weight"] = mat(N_HEAD_KV * head_dim, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        tensors[p + "attn_output.weight"] = mat(N_EMBD, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        tensors[p + "ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        tensors[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        tensors[p + "ffn_up.weight"] = mat(N_FF, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        tensors[p + "ffn_down.weight"] = mat(N_EMBD, N_FF, 1.0 / np.sqrt(N_FF))
    tensors["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    output = mat(n_vocab, N_EMBD, 3.0 / np.sqrt(N_EMBD))
    output[np.asarray(types) == BYTE_TOKEN] *= 0.05
    tensors["output.weight"] = output

    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("precisionbot-tiny-llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    qtype = None
    if quantize == "q8_0":
        qtype = gguf.GGMLQuantizationType.Q8_0
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    elif quantize == "q4_0":
        qtype = gguf.GGMLQuantizationType.Q4_0
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    elif quantize is None:
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    else:
        raise ValueError(f"unsupported quantize={quantize!r}; use None, 'q8_0' or 'q4_0'")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(int(field("tokenizer.ggml.bos_token_id")))  # type: ignore[call-overload]
    writer.add_eos_token_id(int(field("tokenizer.ggml.eos_token_id")))  # type: ignore[call-overload]
    writer.add_unk_token_id(int(field("tokenizer.ggml.unknown_token_id")))  # type: ignore[call-overload]
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    for name, data in tensors.items():
        if qtype is not None and data.ndim == 2 and name != "token_embd.weight":
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out
