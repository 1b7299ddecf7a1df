from __future__ import annotations

from collections.abc import Iterator

import pytest

from precisionbot.gh.rest import RestGitHub, connect
from tests.support.fake_github import FakeGitHub


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """A fresh fake GitHub API on 127.0.0.1 (repo ``acme/engine``, token ``test-token``)."""
    with FakeGitHub() as fake:
        yield fake


def rest(fake: FakeGitHub, retries: int = 3) -> RestGitHub:
    """The real PyGithub adapter pointed at the fake, with tiny backoff and no politeness pauses."""
    return connect(fake.token or "", fake.repo, fake.url, retries=retries, backoff_s=0.001, throttle=False)


@pytest.fixture
def api(fake_github: FakeGitHub) -> RestGitHub:
    return rest(fake_github)
