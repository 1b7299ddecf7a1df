"""A real engine git repository for the commands that build and launch an engine at a commit (``bisect``, the
merge-base A/B): each commit's ``fault.txt`` holds the builtin engine's ``--fault`` flags, which the launch
template reads, and a commit with a ``broken`` file fails the install command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@e",
        },
    ).stdout.strip()


def commit(repo: Path, message: str, fault: str | None = None, broken: bool | None = None) -> str:
    if fault is not None:
        (repo / "fault.txt").write_text(fault)
    if broken is True:
        (repo / "broken").write_text("x")
    elif broken is False:
        (repo / "broken").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write_config(path: Path, repo: Path) -> Path:
    """An engine built and launched from the checkout: ``install`` fails where the commit has ``broken``."""
    serve = f"{shlex.quote(sys.executable)} -m precisionbot serve --port {{port}} --model-preset tiny"
    launch = f"sh -c 'exec {serve} $(cat fault.txt)'"
    path.write_text(
        json.dumps(
            {
                "engine": {"kind": "builtin", "launch": launch, "install": "test ! -e broken", "checkout": str(repo)},
                "models": [{"name": "tiny", "path": "builtin"}],
                "baselines": {"store": str(path.parent / "store")},
            }
        )
    )
    return path
