from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.engine_server import running_engine


@pytest.fixture(scope="module")
def clean_url() -> Iterator[str]:
    """One clean builtin server per test module."""
    with running_engine(chunked_prefill_size=128) as url:
        yield url


@pytest.fixture
def client(clean_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=clean_url, timeout=120) as c:
        assert c.post("/flush_cache").status_code == 200
        yield c
