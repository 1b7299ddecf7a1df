from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_github import FakeGitHub


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """A fresh fake GitHub API on 127.0.0.1 (repo ``acme/engine``, token ``test-token``)."""
    with FakeGitHub() as fake:
        yield fake
