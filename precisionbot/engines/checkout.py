"""An engine's git checkout, and an engine built and launched at one of its commits.

Bisecting and the same-runner A/B both need an engine at a commit other than the one checked out: each such
commit gets its own ``git worktree`` (the user's checkout is never switched or dirtied), the config's
``engine.install`` runs in it (a build that fails makes the commit *untestable*, not bad), and
``engine.launch`` starts the server from it. The worktree is removed afterwards, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from precisionbot import envvars
from precisionbot.engines.allocation import slurm_allocation
from precisionbot.engines.launcher import Launcher, log_tail
from precisionbot.errors import ConfigError, EngineStartError

GIT_TIMEOUT_S = 600.0
INSTALL_TIMEOUT_S = 7200.0
"""A from-source engine build (CUDA kernels) can take the better part of an hour."""


class BuildFailed(EngineStartError):
    """``engine.install`` failed at a commit: that commit cannot be tested (bisect skips it)."""


class Checkout:
    """A git repository holding the engine's source."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if shutil.which("git") is None:
            raise ConfigError("git is not installed; install git to bisect or run an A/B against the merge base")
        if self._git("rev-parse", "--git-dir", check=False).returncode != 0:
            raise ConfigError(
                f"engine checkout {self.path} is not a git repository; set engine.checkout (or --checkout) to the "
                "engine's clone"
            )

    def _git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        if check and done.returncode != 0:
            raise ConfigError(f"git {' '.join(args)} failed in {self.path}: {done.stderr.strip().splitlines()[-1:]}")
        return done

    def resolve(self, rev: str, what: str = "commit") -> str:
        """The full sha of ``rev``; a one-line error naming it when the checkout does not have it."""
        done = self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if done.returncode != 0 or not done.stdout.strip():
            raise ConfigError(
                f"{what} {rev!r} is not a commit of {self.path}; fetch it (git fetch origin {rev}) or fix the sha"
            )
        return done.stdout.strip()

    def between(self, good: str, bad: str) -> list[str]:
        """The commits after ``good`` up to and including ``bad``, oldest first, on the ancestry path."""
        if self._git("merge-base", "--is-ancestor", good, bad, check=False).returncode != 0:
            raise ConfigError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}; swap them or fix the shas")
        out = self._git("rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}").stdout.split()
        if not out:
            raise ConfigError(f"--good and --bad are the same commit ({good[:12]}): nothing to bisect")
        return out

    def merge_base(self, a: str, b: str) -> str:
        done = self._git("merge-base", a, b, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            raise ConfigError(f"{a!r} and {b!r} have no merge base in {self.path}; fetch the base branch's history")
        return done.stdout.strip()

    def subject(self, sha: str) -> str:
        return self._git("log", "-1", "--format=%s", sha).stdout.strip()

    @contextlib.contextmanager
    def worktree(self, sha: str) -> Iterator[Path]:
        """A detached worktree of ``sha`` in a temporary directory, removed on exit."""
        parent = Path(tempfile.mkdtemp(prefix="precisionbot-commit-"))
        where = parent / sha[:12]
        self._git("worktree", "add", "--detach", "--force", str(where), sha)
        try:
            yield where
        finally:
            self._git("worktree", "remove", "--force", str(where), check=False)
            shutil.rmtree(parent, ignore_errors=True)
            self._git("worktree", "prune", check=False)


def install(command: str, cwd: Path, log_path: Path, sha: str, timeout_s: float = INSTALL_TIMEOUT_S) -> None:
    """Run ``engine.install`` in a commit's worktree; ``BuildFailed`` with the log's tail when it fails."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, envvars.ENGINE_COMMIT: sha}
    with log_path.open("ab") as log:
        try:
            code = subprocess.run(
                command, shell=True, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        how = f"exited with code {code}" if code is not None else f"ran past {timeout_s:g} s"
        raise BuildFailed(f"engine.install {how} at {sha[:12]}; log tail ({log_path}):\n{log_tail(log_path)}")


@contextlib.contextmanager
def launched_at(
    checkout: Checkout,
    sha: str,
    *,
    install_command: str | None,
    launch: str,
    model: str,
    tp: int,
    args: str,
    log_dir: Path,
    health_timeout_s: float,
) -> Iterator[str]:
    """The URL of the engine built and launched at ``sha`` (stopped, and its worktree removed, on exit)."""
    with checkout.worktree(sha) as where:
        if install_command:
            install(install_command, where, log_dir / f"install-{sha[:12]}.log", sha)
        launcher = Launcher(
            launch,
            model=model,
            tp=tp,
            args=args,
            log_path=log_dir / f"engine-{sha[:12]}.log",
            health_timeout_s=health_timeout_s,
            env={envvars.ENGINE_COMMIT: sha},
            cwd=where,
            allocation=slurm_allocation(os.environ),
        )
        launcher.start()
        try:
            yield launcher.url
        finally:
            launcher.stop()
