"""The SGLang client against a small local server that answers wrongly in precise ways (real HTTP)."""

from __future__ import annotations

import socket
import time

import pytest

from precisionbot.engines.base import GenerateRequest
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.errors import EngineError
from tests.support.fake_sglang import BOS, Behaviour, fake_sglang, toy_logprobs


def _reqs(n: int, new: int = 4, start: int = -1, top: int = 0) -> list[GenerateRequest]:
    return [
        GenerateRequest((BOS, 5 + i, 7, 9, 11 + i), max_new_tokens=new, logprob_start_len=start, top_logprobs_num=top)
        for i in range(n)
    ]


def _engine(url: str, **kw: object) -> SGLangEngine:
    return SGLangEngine(url, batch_size=2, concurrency=3, backoff_s=0.01, **kw)  # type: ignore[arg-type]


def test_generate_batches_concurrently_in_order_with_explicit_temperature() -> None:
    with fake_sglang() as (url, b):
        engine = _engine(url)
        reqs = _reqs(7, new=3, start=0, top=2)
        done: list[int] = []
        gens = engine.generate(reqs, progress=done.append)
        engine.close()
    assert [g.input_ids for g in gens] == [r.input_ids for r in reqs]
    assert sum(done) == 7
    assert sorted(len(body["input_ids"]) for body in b.bodies) == [1, 2, 2, 2]  # concurrent: any order
    for body in b.bodies:
        for sp in body["sampling_params"]:
            assert sp == {"temperature": 0.0, "max_new_tokens": 3, "ignore_eos": True}
        assert body["return_logprob"] is True
    g = gens[3]
    # Independent reference: the toy model's own logprobs at each position.
    seq = list(reqs[3].input_ids)
    for k, tok in enumerate(g.output_ids):
        assert g.output_logprobs[k] == pytest.approx(toy_logprobs(seq)[tok])
        seq.append(tok)
    assert len(g.input_logprobs) == 5 and g.input_logprobs[0] != g.input_logprobs[0]  # NaN at position 0
    assert g.input_logprobs[2] == pytest.approx(toy_logprobs(list(reqs[3].input_ids[:2]))[7])
    assert g.input_top is not None and g.input_top.ids.shape == (5, 2)
    assert g.output_top is not None and g.output_top.ids[0, 0] == g.output_ids[0]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("short_output", "request 0: meta_info.output_token_logprobs has 3 entries, expected 4"),
        ("short_input", "request 0: meta_info.input_token_logprobs has 4 entries, expected 5"),
        ("null_output", "request 0: meta_info.output_token_logprobs[0] is null where a logprob belongs"),
        ("null_input_mid", "request 0: meta_info.input_token_logprobs[2] is null where a logprob belongs"),
        ("nan", "request 0: meta_info.output_token_logprobs[0] is not a valid logprob (got nan)"),
        ("wrong_ids", "request 0: output_ids disagree with the token ids"),
        ("no_meta", "request 0: meta_info is missing"),
        ("wrong_batch", "the batch answer has 1 results for 2 prompts"),
        ("bad_json", "answered invalid JSON"),
        ("status500", "answered HTTP 500: CUDA error: an illegal memory access"),
        ("status400", "answered HTTP 400: input_ids out of range"),
    ],
)
def test_bad_answers_are_engine_errors_naming_request_and_field(mode: str, expected: str) -> None:
    with fake_sglang(Behaviour(mode=mode)) as (url, b):
        engine = _engine(url)
        with pytest.raises(EngineError) as info:
            engine.generate(_reqs(2, start=0))
        engine.close()
    assert expected in str(info.value)
    assert "\n" not in str(info.value)
    if mode.startswith("status"):
        assert b.calls.count("POST /generate") == 1  # never retried: retrying cannot help


def test_503_is_retried_with_backoff() -> None:
    with fake_sglang(Behaviour(unavailable=2)) as (url, b):
        engine = _engine(url)
        gens = engine.generate(_reqs(1))
        engine.close()
    assert len(gens) == 1
    assert b.calls.count("POST /generate") == 3


def test_hang_is_a_timeout_error_not_a_wait() -> None:
    # The hang outlasts the bound by far, so a loaded CI machine (seconds of stall) cannot fail the bound while a
    # client that waits for the answer still does; the fake's daemon handler thread sleeps on after the test.
    with fake_sglang(Behaviour(mode="hang", hang_s=60.0)) as (url, _):
        engine = _engine(url, request_timeout_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(EngineError, match=r"no answer from .*/generate within 0.3 s"):
            engine.generate(_reqs(1))
        assert time.monotonic() - t0 < 30
        engine.close()


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = SGLangEngine(f"http://127.0.0.1:{port}", retries=2, backoff_s=0.01)
    with pytest.raises(EngineError, match=r"failed after 3 attempt\(s\) \(ConnectError.*is the engine running\?"):
        engine.generate(_reqs(1))
    assert engine.health() is False
    engine.close()


def test_flush_cache_waits_while_busy_then_gives_up_at_deadline() -> None:
    with fake_sglang(Behaviour(busy_flushes=3)) as (url, b):
        engine = _engine(url)
        engine.flush_cache()
        assert b.calls.count("POST /flush_cache") == 4
        b.busy_flushes = 10_000
        engine.flush_timeout_s = 0.3
        with pytest.raises(EngineError, match=r"/flush_cache still answered 400 \(engine busy\) after 0.3 s"):
            engine.flush_cache()
        engine.close()


def test_server_info_falls_back_to_get_server_info() -> None:
    with fake_sglang(Behaviour(server_info_404=True, disable_radix_cache=True)) as (url, b):
        engine = _engine(url)
        info = engine.server_info()
        assert engine.health() is True
        engine.close()
    assert info.version == "fake-old"
    assert info.disable_radix_cache is True
    assert b.calls[:2] == ["GET /server_info", "GET /get_server_info"]


def test_tokenize_uses_the_engine() -> None:
    with fake_sglang() as (url, _):
        engine = _engine(url)
        ids = engine.tokenize(["ab", "xyz", "q"])
        engine.close()
    assert [len(t) for t in ids] == [3, 4, 2]
    assert all(t[0] == BOS for t in ids)


def test_request_validation() -> None:
    with pytest.raises(ValueError):
        GenerateRequest((), max_new_tokens=1)
    with pytest.raises(ValueError):
        GenerateRequest((1,), max_new_tokens=-1)
