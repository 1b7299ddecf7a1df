from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.moto_server import moto_server, reset_and_point_at


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """One moto server (S3 + EC2) on 127.0.0.1 for the whole session."""
    with moto_server() as url:
        yield url


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """moto's server, reset for this test, with AWS_* env (AWS_ENDPOINT_URL ...) pointing at it; yields its URL."""
    return reset_and_point_at(moto_url, monkeypatch)
