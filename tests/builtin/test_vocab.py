"""The hybrid preset's subword vocabulary (bpe.py): deterministic, byte fallback, cached, served as subwords."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from precisionbot.builtin import bpe
from precisionbot.builtin.options import EngineOptions
from precisionbot.builtin.tokenizer import BYTE_VOCAB, vocab_for
from tests.support.engine_server import running_engine

ODD = "naïve café — 🦊 x\x00\x07\ttabs\r\n\u200b末尾"


def test_training_is_deterministic_and_has_the_promised_shape() -> None:
    first, second = bpe.train_bpe(), bpe.train_bpe()
    assert first == second
    vocab = bpe.BpeVocab(first)
    assert vocab.size == bpe.BPE_VOCAB_SIZE
    assert (vocab.bos_id, vocab.eos_id) == (0, 1)
    assert vocab.token_text(vocab.bos_id) == "<s>"


def test_any_text_round_trips_through_byte_fallback() -> None:
    vocab = vocab_for("bpe-4096")
    ids = vocab.encode(ODD)
    assert ids[0] == vocab.bos_id and all(0 <= i < vocab.size for i in ids)
    assert vocab.decode(ids) == ODD
    # Subwords, not bytes: common words are one token, so text is several times shorter than its bytes.
    prose = "The statement is executed in the current namespace before the function returns."
    assert len(vocab.encode(prose, add_bos=False)) * 3 < len(prose.encode())
    # A token holding part of a multi-byte character reads U+FFFD, as a tokenizer's decode of it alone does.
    fox = vocab.encode("🦊", add_bos=False)
    assert len(fox) > 1 and "\ufffd" in {vocab.token_text(i) for i in fox}


def test_the_hybrid_preset_speaks_subwords_and_tiny_keeps_bytes() -> None:
    assert EngineOptions().vocab_name == "bpe-4096" and EngineOptions(preset="tiny").vocab_name == "byte"
    assert EngineOptions(vocab="byte").vocab_name == "byte"
    assert vocab_for("byte") is BYTE_VOCAB
    assert BYTE_VOCAB.encode("ab") == [256, 97, 98]


def test_the_cache_is_written_reused_and_survives_corruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRECISIONBOT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(bpe, "_LOADED", {})
    trained = bpe.load_bpe()
    (path,) = tmp_path.glob("tokenizer-bpe*.json")
    assert path.read_text(encoding="utf-8") == trained.serialized
    path.write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(bpe, "_LOADED", {})
    again = bpe.load_bpe()
    assert again.serialized == trained.serialized
    assert path.read_text(encoding="utf-8") == trained.serialized


def test_the_hybrid_engine_serves_subwords() -> None:
    vocab = vocab_for("bpe-4096")
    with running_engine(preset="hybrid") as url, httpx.Client(base_url=url, timeout=120) as c:
        info = c.get("/server_info").json()["model_config"]
        assert (info["vocab_size"], info["vocab"], info["bos_token_id"]) == (vocab.size, "bpe-4096", vocab.bos_id)
        tok = c.post("/tokenize", json={"prompt": "The function returns", "return_token_strs": True}).json()
        assert tok["token_strs"] == ["<s>", "The", " function", " returns"]
        body = {"text": "The function returns", "sampling_params": {"max_new_tokens": 4, "temperature": 0},
                "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 20,
                "return_text_in_logprobs": True}  # fmt: skip
        out = c.post("/generate", json=body).json()
        meta = out["meta_info"]
        assert [e[2] for e in meta["input_token_logprobs"]] == tok["token_strs"]
        assert out["text"] == vocab.decode(out["output_ids"])
        for top in meta["output_top_logprobs"]:
            assert len(top) == 20 and all(t == vocab.token_text(i) for _, i, t in top)
        assert any(len(t) > 1 for top in meta["output_top_logprobs"] for _, _, t in top)
        big = c.post("/generate", json={"input_ids": [vocab.size], "sampling_params": {"max_new_tokens": 1}})
        assert big.status_code == 400 and str(vocab.size - 1) in big.text


def test_the_vocab_flag_reaches_the_engine_options() -> None:
    import argparse

    from precisionbot.commands.options.builtin import add_engine_flags, engine_kwargs, given
    from precisionbot.errors import ConfigError

    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    args = parser.parse_args(["--vocab", "bpe-4096"])
    assert given(args) and EngineOptions(**engine_kwargs(args)).vocab == "bpe-4096"
    assert EngineOptions(**engine_kwargs(parser.parse_args([]))).vocab_name == "bpe-4096"
    assert EngineOptions(**engine_kwargs(parser.parse_args(["--vocab", "byte"]))).vocab_name == "byte"
    with pytest.raises(ConfigError, match="vocab must be one of byte, bpe-4096"):
        EngineOptions(vocab="bpe-9")
