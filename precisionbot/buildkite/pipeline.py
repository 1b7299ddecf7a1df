"""The Buildkite pipeline that runs precisionbot: one check step per model on the GPU queue, then one step on
a small queue that posts the sticky comment and the commit status. Pure: config and options in, YAML out.

Upload it from the pipeline's first step (``precisionbot buildkite pipeline --queue gpu-h200 |
buildkite-agent pipeline upload``). The shape, and why:

* **check steps** (``agents: {queue: <GPU queue>}``): ``precisionbot check`` for each model of the suite (the
  same cells as the GitHub workflow's matrix, ``gh/matrix.py``), each writing ``<results>/<cell>`` and
  uploading it as artifacts. They run the PR's code and hold no token. A failed check fails its step (exit 1;
  2 is inconclusive), which Buildkite shows red; an agent lost mid-run (exit -1, a reclaimed spot instance) is
  retried, a verdict never is.
* **the post step** (``agents: {queue: <post queue>}``): ``checkout: {skip: true}``, so no code of the PR
  (nor its ``.buildkite/hooks``) runs where the GitHub token is; it downloads the artifacts, which it reads as
  untrusted data (``comment_action`` re-derives every verdict), and runs ``precisionbot buildkite post``.
  ``allow_dependency_failure`` makes it run after a failed check too: a FAIL is what the comment is for.
  It refuses to share the GPU queue (the token would sit where PR code runs).

Buildkite interpolates ``$VAR`` in the uploaded YAML with the uploader's environment; the commands write
``$$BUILDKITE_COMMIT`` so the job's own shell expands it, at run time.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from precisionbot.config import Config
from precisionbot.errors import ConfigError
from precisionbot.gh.matrix import build_matrix

CHECK_KEY = "precisionbot-check-{cell}"
POST_KEY = "precisionbot-post"
AGENT_LOST = -1
"""The exit status Buildkite gives a job whose agent vanished (a reclaimed spot instance, a drained pod)."""


@dataclass(frozen=True)
class PipelineOptions:
    queue: str
    """The GPU agents' queue (``agents: {queue: ...}`` of each check step)."""
    post_queue: str = "default"
    """A small queue without PR code, whose agents may hold the GitHub token."""
    config_path: str = ".github/precision.yml"
    suite: str | None = None
    """Default: the config's ``github.pr_suite``."""
    models: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    samples: int | None = None
    timeout_minutes: int = 100
    install: str | None = None
    """A command run before each check (``pip install -e .``: the engine build under test)."""
    token_secret: str | None = None
    """The Buildkite secret that holds the GitHub token, given to the post step only (None: the post queue's
    agents set ``PRECISIONBOT_GITHUB_TOKEN`` in their environment hook)."""
    results: str = "precisionbot-results"


def build_pipeline(config: Config, options: PipelineOptions) -> dict[str, Any]:
    """The pipeline as a mapping (``steps`` only). ``ConfigError`` for an unknown suite or model, an
    out-of-range timeout or a post queue that is the GPU queue."""
    if not options.queue:
        raise ConfigError("no GPU queue: pass --queue (the agents' queue tag, e.g. gpu-h200) or set buildkite.queue")
    if options.post_queue == options.queue:
        raise ConfigError(
            f"--post-queue is the GPU queue {options.queue!r}: the post step holds the GitHub token, and the GPU "
            "queue's agents run PR code; give it a small queue of its own (e.g. --post-queue small-cpu)"
        )
    if not 1 <= options.timeout_minutes <= 24 * 60:
        raise ConfigError(f"--timeout-minutes {options.timeout_minutes} is not in 1..1440")
    suite = options.suite or config.github.pr_suite
    cells = build_matrix(config, suite, options.models, options.checks, options.samples)["include"]
    steps: list[dict[str, Any]] = [_check_step(i, cell, options) for i, cell in enumerate(cells)]
    steps.append(_post_step(len(cells), suite, options))
    return {"steps": steps}


def _check_step(index: int, cell: dict[str, Any], options: PipelineOptions) -> dict[str, Any]:
    out = f"{options.results}/{index}"
    args = [
        "precisionbot", "check", "--config", options.config_path, "--suite", str(cell["suite"]),
        "--model", str(cell["model"]), "--checks", str(cell["checks"]), "--samples", str(cell["samples"]),
        "--out", out,
    ]  # fmt: skip
    check = f'{_shell(args)} --engine-commit "$$BUILDKITE_COMMIT"'
    return {
        "label": f":microscope: precisionbot {cell['name']}",
        "key": CHECK_KEY.format(cell=index),
        "agents": {"queue": options.queue},
        "timeout_in_minutes": options.timeout_minutes,
        "commands": [_escape(options.install), check] if options.install else [check],
        "artifact_paths": [f"{out}/**/*"],
        "retry": {"automatic": [{"exit_status": AGENT_LOST, "limit": 2}]},
    }


def _post_step(cells: int, suite: str, options: PipelineOptions) -> dict[str, Any]:
    dirs = [f"{options.results}/{i}" for i in range(cells)]
    pattern = f"{options.results}/**/*"
    step: dict[str, Any] = {
        "label": ":github: precisionbot comment and commit status",
        "key": POST_KEY,
        "depends_on": [CHECK_KEY.format(cell=i) for i in range(cells)],
        "allow_dependency_failure": True,
        "agents": {"queue": options.post_queue},
        "checkout": {"skip": True},
        "timeout_in_minutes": 10,
        "commands": [
            # A cell whose check died before writing anything still gets its folder: it shows as "no result".
            _shell(["mkdir", "-p", *dirs]),
            f"buildkite-agent artifact download {_shell([pattern])} . || echo 'no precisionbot results uploaded'",
            _shell(["precisionbot", "buildkite", "post", "--suite", suite, *dirs]),
        ],
    }
    if options.token_secret:
        step["secrets"] = {"PRECISIONBOT_GITHUB_TOKEN": options.token_secret}
    return step


def _shell(args: Sequence[str]) -> str:
    return _escape(shlex.join(args))


def _escape(text: str) -> str:
    """``$`` doubled: Buildkite's upload would otherwise substitute it from the uploader's environment."""
    return text.replace("$", "$$")


def render_pipeline(pipeline: dict[str, Any], command_line: str) -> str:
    """The YAML ``buildkite-agent pipeline upload`` reads, under a comment naming the command that made it."""
    head = (
        f"# Generated by `{command_line}`: regenerate rather than edit.\n"
        f"# Upload it from the pipeline's first step: {command_line} | buildkite-agent pipeline upload\n"
    )
    return head + yaml.safe_dump(pipeline, sort_keys=False, width=1000, allow_unicode=True)
