"""The fixtures the command tests share with the rooms whose adapters those commands drive: the fake GitHub API
(``fake_github``, from tests/gh), and for the ``runner`` commands the fake GitHub with its token in the
environment and moto's EC2 (``github`` and ``cloud``, from tests/runners)."""

from __future__ import annotations

from tests.gh.conftest import fake_github
from tests.runners.conftest import cloud, github

__all__ = ["cloud", "fake_github", "github"]
