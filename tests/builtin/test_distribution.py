"""The distribution targets (issue 3) on the default corpus: some positions confident, some near-tied."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from precisionbot.corpus import builtin_documents
from tests.support.engine_server import running_engine


@pytest.fixture(params=["tiny", "hybrid", "hybrid+byte"])
def preset_client(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    preset, _, vocab = str(request.param).partition("+")
    with running_engine(preset=preset, vocab=vocab or None) as url, httpx.Client(base_url=url, timeout=300) as c:
        yield c


def test_distributions_look_like_a_real_model(preset_client: httpx.Client) -> None:
    client = preset_client
    docs = builtin_documents()
    prose = [d for d in docs if d.kind == "prose"]
    code = [d for d in docs if d.kind == "code"]
    chosen = [prose[i * len(prose) // 4] for i in range(4)] + [code[i * len(code) // 4] for i in range(4)]
    texts = [(d.text or "")[:800] for d in chosen]
    body = {"text": texts, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
            "logprob_start_len": 0, "top_logprobs_num": 2}  # fmt: skip
    top1, margin = [], []
    for out in client.post("/generate", json=body).json():
        for top in out["meta_info"]["input_top_logprobs"][1:]:
            top1.append(np.exp(top[0][0]))
            margin.append(top[0][0] - top[1][0])
    p, m = np.array(top1), np.array(margin)
    assert 0.2 <= np.median(p) <= 0.9
    assert np.mean(m < 0.5) >= 0.10
    assert np.mean(m > 2.0) >= 0.20
