from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.moto_server import moto_server


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh moto server (S3 + EC2) on 127.0.0.1; yields its URL, with AWS_* env pointing at it."""
    with moto_server(monkeypatch) as url:
        yield url
