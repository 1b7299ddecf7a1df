from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.engine_server import running_engine


@pytest.fixture(scope="module")
def clean_url() -> Iterator[str]:
    """One clean builtin server per test module, with bit-exact paths: the engine tests compare its paths exactly
    (production numerics have their own tests in test_model_invariance.py and test_hybrid.py)."""
    with running_engine(chunked_prefill_size=128, enable_deterministic_inference=True) as url:
        yield url


@pytest.fixture
def client(clean_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=clean_url, timeout=120) as c:
        assert c.post("/flush_cache").status_code == 200
        yield c
