"""From the gate's decision on ``/precision rerun`` to the Buildkite build that runs it. Pure.

The gate (``gh/gate.py``) has already decided who may run what on which commit, with the same rules as on
GitHub Actions: the ``rerun`` role, a fork head named in full with ``sha=`` and approved in a review of that
commit. What is left here:

* only ``check`` runs go to Buildkite: ``/precision baseline``, ``accept`` and ``bisect`` record baselines or
  build every commit, which the generated pipeline does not do; they are refused with a reply saying so;
* the build is of exactly the commit the gate pinned, and the PR is read again just before: a push between
  the gate's read and the build makes it refused (the next comment runs the new head);
* the build carries the PR (``pull_request_id``, base branch, head repository) so Buildkite checks out
  ``refs/pull/N/head`` and sets ``BUILDKITE_PULL_REQUEST``, which ``buildkite post`` comments on, and the
  rerun's models, checks and samples as build environment for ``buildkite pipeline``.
"""

from __future__ import annotations

from dataclasses import replace

from precisionbot import envvars
from precisionbot.buildkite.api import Build, BuildRequest
from precisionbot.gh.api import PullInfo
from precisionbot.gh.gate import CONFUSED, EYES, Decision


def refuse_mode(decision: Decision) -> Decision | None:
    """A refusal when the gate would run something other than a check (None: a check, or nothing to run)."""
    if not decision.run or decision.mode == "check":
        return None
    return Decision(
        run=False,
        reason=f"mode {decision.mode!r} is not run on Buildkite (only /precision rerun is)",
        pr=decision.pr,
        reactions=(EYES, CONFUSED),
        reply=f"😕 This repository runs precisionbot on Buildkite, where only `/precision rerun` starts a "
        f"build; `{decision.mode}` runs are not part of its pipeline.",
    )


def head_moved(decision: Decision, pull: PullInfo) -> Decision | None:
    """A refusal when the PR head is no longer the commit the gate pinned (None: it still is)."""
    if pull.head_sha == decision.sha and pull.state == "open":
        return None
    now = pull.head_sha if pull.state == "open" else f"{pull.head_sha} and the PR is {pull.state}"
    return Decision(
        run=False,
        reason=f"PR #{pull.number} moved from {decision.sha} to {now} before the build was created",
        pr=decision.pr,
        reactions=(EYES, CONFUSED),
        reply=f"😕 The PR head is now `{pull.head_sha}`, not `{decision.sha}`: review the new commits and "
        "comment again.",
    )


def build_request(decision: Decision, pull: PullInfo, server_url: str) -> BuildRequest:
    """The build of ``decision.sha`` for PR ``pull``. Buildkite names a fork PR's branch ``owner:branch``
    (as its GitHub integration does), so the pipeline's branch filters see the same name either way."""
    branch = pull.head_ref or f"pull/{pull.number}/head"
    if pull.is_fork and pull.head_repo:
        branch = f"{pull.head_repo.split('/', 1)[0]}:{branch}"
    cells = decision.matrix.get("include", [])
    env = {envvars.RERUN_SUITE: decision.suite}
    if cells:
        env[envvars.RERUN_MODELS] = ",".join(dict.fromkeys(str(cell["model"]) for cell in cells))
        env[envvars.RERUN_CHECKS] = str(cells[0]["checks"])
        env[envvars.RERUN_SAMPLES] = str(cells[0]["samples"])
    head_repo = pull.head_repo or pull.base_repo
    return BuildRequest(
        commit=decision.sha,
        branch=branch,
        message=f"precisionbot: {decision.reason} on PR #{pull.number}",
        env=env,
        pull_request_id=pull.number,
        pull_request_base_branch=pull.base_ref,
        pull_request_repository=f"{server_url.rstrip('/')}/{head_repo}.git",
    )


def started(decision: Decision, build: Build) -> Decision:
    """The decision with a reply that names the build (🚀 was already among its reactions)."""
    reply = (
        f"🚀 Running suite `{decision.suite}` ({decision.mode}) on commit `{decision.sha}` in Buildkite build "
        f"[#{build.number}]({build.web_url})."
    )
    return replace(decision, reply=reply, reason=f"{decision.reason}: Buildkite build #{build.number}")


def not_started(decision: Decision, why: str) -> Decision:
    """The decision turned into a refusal when Buildkite would not create the build (the log says why; the
    reply does not quote Buildkite's answer)."""
    return Decision(
        run=False,
        reason=f"the Buildkite build was not created: {why}",
        pr=decision.pr,
        reactions=(EYES, CONFUSED),
        reply="😕 The run was allowed, but Buildkite did not create the build: the workflow's log says why.",
    )
