"""SGLang API shapes and invariants through real HTTP."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import httpx
import pytest

from precisionbot.builtin.tokenizer import BOS_ID, EOS_ID, encode

GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


def _gen(client: httpx.Client, **body: Any) -> Any:
    r = client.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_single_text_request_shape(client: httpx.Client) -> None:
    out = _gen(client, text="Hello, world", sampling_params=GREEDY, return_logprob=True, top_logprobs_num=3)
    meta = out["meta_info"]
    assert len(out["output_ids"]) == 8 and isinstance(out["text"], str)
    assert meta["prompt_tokens"] == len(encode("Hello, world")) and meta["completion_tokens"] == 8
    assert meta["cached_tokens"] == 0 and meta["e2e_latency"] > 0
    assert meta["finish_reason"] == {"type": "length", "length": 8}
    # logprob_start_len defaults to -1: output only (one null input entry, for the last prompt token)
    assert meta["input_token_logprobs"] == [[None, ord("d"), None]]
    assert len(meta["output_token_logprobs"]) == 8 and len(meta["output_top_logprobs"]) == 8
    for (lp, tid, text), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"], strict=True):
        assert text is None and lp <= 0 and len(top) == 3
        assert top[0][0] >= top[1][0] >= top[2][0]
        assert tid == top[0][1] and lp == top[0][0]  # greedy: the chosen token is the argmax, raw logprob


def test_batch_input_ids_with_full_prompt_logprobs(client: httpx.Client) -> None:
    prompts = [encode("abc abc abc"), encode("def f(x): return x")]
    out = _gen(
        client,
        input_ids=prompts,
        sampling_params=[{**GREEDY, "max_new_tokens": 2}, {**GREEDY, "max_new_tokens": 3}],
        return_logprob=True,
        logprob_start_len=0,
        top_logprobs_num=2,
        return_text_in_logprobs=True,
    )
    assert isinstance(out, list) and [o["meta_info"]["completion_tokens"] for o in out] == [2, 3]
    for prompt, o in zip(prompts, out, strict=True):
        meta = o["meta_info"]
        lps = meta["input_token_logprobs"]
        assert len(lps) == meta["prompt_tokens"] - 0 == len(prompt)
        assert lps[0] == [None, BOS_ID, "<s>"] and meta["input_top_logprobs"][0] is None
        assert [e[1] for e in lps] == prompt and all(e[0] <= 0 for e in lps[1:])
        assert lps[1][2] == chr(prompt[1]) and len(meta["input_top_logprobs"][1]) == 2
        probs = sum(math.exp(t[0]) for t in meta["input_top_logprobs"][1])
        assert 0 < probs <= 1 + 1e-6


def test_logprob_start_len_k(client: httpx.Client) -> None:
    ids = encode("x = [i * i for i in range(10)]")
    out = _gen(client, input_ids=ids, sampling_params=GREEDY, return_logprob=True, logprob_start_len=5)
    lps = out["meta_info"]["input_token_logprobs"]
    assert len(lps) == len(ids) - 5 and lps[0][0] is None and lps[0][1] == ids[5]
    full = _gen(client, input_ids=ids, sampling_params=GREEDY, return_logprob=True, logprob_start_len=0)
    assert full["meta_info"]["input_token_logprobs"][6:] == lps[1:]


def test_null_sampling_params_mean_defaults(client: httpx.Client) -> None:
    sp = {"temperature": 0, "max_new_tokens": 3, "top_k": None, "stop": None, "sampling_seed": None}
    assert _gen(client, text="abc", sampling_params=sp)["meta_info"]["completion_tokens"] == 3


def test_token_ids_logprob(client: httpx.Client) -> None:
    out = _gen(client, text="ab", sampling_params=GREEDY, return_logprob=True, token_ids_logprob=[97, 98])
    chosen = out["meta_info"]["output_token_ids_logprob"]
    assert len(chosen) == 8 and [e[1] for e in chosen[0]] == [97, 98]


def test_stop_conditions(client: httpx.Client) -> None:
    out = _gen(
        client,
        text="aaaa",
        sampling_params={"temperature": 0, "max_new_tokens": 50, "stop_token_ids": [97, 32, 101, 115]},
    )
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert out["meta_info"]["finish_reason"]["matched"] in (97, 32, 101, 115)
    assert out["output_ids"][-1] == out["meta_info"]["finish_reason"]["matched"]
    first = _gen(client, text="The", sampling_params={"temperature": 0, "max_new_tokens": 20})
    stop = first["text"][2:4]
    out = _gen(client, text="The", sampling_params={"temperature": 0, "max_new_tokens": 20, "stop": stop})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert stop not in out["text"]
    zero = _gen(client, text="The", sampling_params={"max_new_tokens": 0})
    assert zero["output_ids"] == [] and zero["meta_info"]["finish_reason"] == {"type": "length", "length": 0}


def test_eos_ends_generation_unless_ignored(client: httpx.Client) -> None:
    body = {"text": "x", "return_logprob": True, "token_ids_logprob": [EOS_ID]}
    out = _gen(client, **body, sampling_params={"temperature": 1.0, "max_new_tokens": 300, "sampling_seed": 3})
    if out["meta_info"]["finish_reason"]["type"] == "stop":
        assert out["output_ids"][-1] == EOS_ID
    out = _gen(
        client,
        **body,
        sampling_params={"temperature": 1.0, "max_new_tokens": 300, "sampling_seed": 3, "ignore_eos": True},
    )
    assert out["meta_info"]["completion_tokens"] == 300


def test_sampling_is_reproducible_and_logprobs_are_temperature_scaled(client: httpx.Client) -> None:
    sp = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 16, "sampling_seed": 42}
    a = _gen(client, text="Once upon", sampling_params=sp, return_logprob=True, top_logprobs_num=258)
    b = _gen(client, text="Once upon", sampling_params=sp, return_logprob=True)
    assert a["output_ids"] == b["output_ids"]
    # the first output position: T-scaled logprobs vs the raw (prompt) logprobs of the same position
    raw = _gen(
        client,
        text="Once upon",
        sampling_params={"max_new_tokens": 1, "temperature": 0},
        return_logprob=True,
        top_logprobs_num=258,
    )
    raw_top = {tid: lp for lp, tid, _ in raw["meta_info"]["output_top_logprobs"][0]}
    scaled = {tid: lp for lp, tid, _ in a["meta_info"]["output_top_logprobs"][0]}
    logits = {t: v / 0.7 for t, v in raw_top.items()}
    norm = math.log(sum(math.exp(v) for v in logits.values()))
    for t in list(scaled)[:5]:
        assert scaled[t] == pytest.approx(logits[t] - norm, abs=1e-4)


def test_stream_sends_chunks_then_done(client: httpx.Client) -> None:
    body = {
        "text": "stream me",
        "sampling_params": {**GREEDY, "max_new_tokens": 12},
        "stream": True,
        "return_logprob": True,
    }
    with client.stream("POST", "/generate", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert chunks and chunks[-1]["meta_info"]["completion_tokens"] == 12
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts)
    solo = _gen(client, **{**body, "stream": False})
    assert chunks[-1]["output_ids"] == solo["output_ids"]


def test_info_endpoints(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    assert client.get("/health_generate").status_code == 200
    for path in ("/server_info", "/get_server_info"):
        info = client.get(path).json()
        assert info["model_path"] == "builtin" and info["faults"] == [] and info["disable_radix_cache"] is False
        assert info["chunked_prefill_size"] == 128 and info["page_size"] == 16 and info["dtype"] == "bfloat16"
        assert "version" in info
    assert client.get("/get_model_info").json()["model_path"] == "builtin"
    assert client.get("/v1/models").json()["data"][0]["id"] == "builtin"
    assert client.get("/nope").status_code == 404


def test_openai_completions(client: httpx.Client) -> None:
    r = client.post(
        "/v1/completions",
        json={"model": "builtin", "prompt": "Hello", "max_tokens": 5, "temperature": 0, "logprobs": 2},
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 5
    assert all(len(t) <= 2 for t in lp["top_logprobs"]) and r.json()["usage"]["completion_tokens"] == 5
    native = _gen(client, text="Hello", sampling_params={"temperature": 0, "max_new_tokens": 5}, return_logprob=True)
    assert lp["token_logprobs"] == [e[0] for e in native["meta_info"]["output_token_logprobs"]]
    r = client.post("/v1/completions", json={"prompt": "Hi there", "max_tokens": 1, "prompt_logprobs": 1})
    plist = r.json()["choices"][0]["prompt_logprobs"]
    assert plist[0] is None and len(plist) == len(encode("Hi there"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"text": "a", "input_ids": [1]}, "exactly one of text or input_ids"),
        ({"input_ids": [1, 999]}, "input_ids[1]"),
        ({"input_ids": [1, "a"]}, "input_ids[1]"),
        ({"text": "a", "sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
        ({"text": "a", "sampling_params": {"max_new_tokens": "5"}}, "sampling_params.max_new_tokens"),
        ({"text": "a", "sampling_params": {"bogus": 1}}, "sampling_params.bogus"),
        ({"text": "a", "frobnicate": True}, "frobnicate"),
        ({"text": "a", "return_logprob": "yes"}, "return_logprob"),
        ({"text": "abc", "logprob_start_len": 10}, "logprob_start_len"),
        ({"text": "a", "sampling_params": {"max_new_tokens": 100000}}, "context length"),
        ({"text": ["a", "b"], "sampling_params": [{}]}, "sampling_params"),
        ({"input_ids": []}, "input_ids must be a non-empty"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_requests_are_400_naming_the_field(client: httpx.Client, body: Any, field: str) -> None:
    r = client.post("/generate", json=body)
    assert r.status_code == 400
    assert field in r.json()["error"]["message"]
    assert client.get("/health").status_code == 200


def test_malformed_json_and_the_server_keeps_serving(client: httpx.Client) -> None:
    r = client.post("/generate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    assert _gen(client, text="ok", sampling_params={"max_new_tokens": 1})["meta_info"]["completion_tokens"] == 1


def test_flush_cache_is_refused_while_requests_run(client: httpx.Client) -> None:
    result: dict[str, Any] = {}

    def long_request() -> None:
        body = {"text": "x", "sampling_params": {"temperature": 0, "max_new_tokens": 400, "ignore_eos": True}}
        result["r"] = client.post("/generate", json=body)

    thread = threading.Thread(target=long_request)
    thread.start()
    deadline = time.monotonic() + 30
    refused = False
    while time.monotonic() < deadline and thread.is_alive() and not refused:
        refused = client.post("/flush_cache").status_code == 400
    thread.join()
    assert refused and result["r"].status_code == 200
    assert client.get("/flush_cache").status_code == 200


def test_tokenize_and_detokenize_in_vllms_shape(client: httpx.Client) -> None:
    # vLLM's /tokenize: what the OpenAI client calls (it cannot tokenize a served model by itself).
    r = client.post("/tokenize", json={"model": "builtin", "prompt": "Héllo"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == encode("Héllo") and body["tokens"][0] == BOS_ID
    assert body["count"] == len(body["tokens"]) and body["token_strs"] is None
    assert body["max_model_len"] == client.get("/v1/models").json()["data"][0]["max_model_len"]
    bare = client.post("/tokenize", json={"prompt": "Hi", "add_special_tokens": False, "return_token_strs": True})
    assert bare.json()["tokens"] == list(b"Hi") and bare.json()["token_strs"] == ["H", "i"]
    back = client.post("/detokenize", json={"model": "builtin", "tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": "Héllo"}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/tokenize", {"prompt": 5}, "prompt must be a string"),
        ("/tokenize", {"prompt": "a", "model": "other"}, "model 'other' is not served here"),
        ("/tokenize", {"prompt": "a", "messages": []}, "unknown field 'messages'"),
        ("/detokenize", {"tokens": [1, 999]}, "tokens[]"),
        ("/detokenize", {"tokens": "abc"}, "tokens must be a list"),
    ],
)
def test_bad_tokenize_requests_are_400(client: httpx.Client, path: str, body: Any, field: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400 and field in r.json()["error"]["message"]


def test_completions_return_tokens_as_token_ids(client: httpx.Client) -> None:
    # vLLM's flag, which the OpenAI client always sets: ids instead of token strings that may collide.
    body = {"prompt": encode("Hi"), "max_tokens": 3, "temperature": 0, "logprobs": 2, "prompt_logprobs": 1}
    plain = client.post("/v1/completions", json=body).json()["choices"][0]
    by_id = client.post("/v1/completions", json={**body, "return_tokens_as_token_ids": True}).json()["choices"][0]
    ids = [int(t.removeprefix("token_id:")) for t in by_id["logprobs"]["tokens"]]
    assert all(t.startswith("token_id:") for t in by_id["logprobs"]["tokens"])
    assert "".join(plain["logprobs"]["tokens"]) == bytes(ids).decode()
    assert by_id["logprobs"]["token_logprobs"] == plain["logprobs"]["token_logprobs"]
    assert all(k.startswith("token_id:") for top in by_id["logprobs"]["top_logprobs"] for k in top)
    assert by_id["prompt_logprobs"][1][str(ord("H"))]["decoded_token"] == f"token_id:{ord('H')}"
