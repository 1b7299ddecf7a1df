from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.buildkite.fake_buildkite import FakeBuildkite
from tests.gh.conftest import fake_github

__all__ = ["fake_buildkite", "fake_github"]


@pytest.fixture
def fake_buildkite() -> Iterator[FakeBuildkite]:
    """A fresh fake Buildkite API on 127.0.0.1 (organization ``vllm``, pipeline ``ci``, token ``bk-token``)."""
    with FakeBuildkite() as fake:
        yield fake
