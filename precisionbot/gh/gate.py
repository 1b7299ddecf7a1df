"""The gate: which events run the (paid, untrusted-code) GPU job, on which commit, with which suite. Pure.

Two steps so the caller fetches only what a decision needs: :func:`needs` says which facts to ask GitHub
for, :func:`decide` turns the event, those facts and the config into a :class:`Decision`.

The head-commit rule for ``/precision rerun`` (time of check vs time of use):

* ``sha=<commit>`` in the comment pins the commit the commenter reviewed: the PR head must still be it.
  PRs from forks *must* name it with all 40 hex digits: their author is untrusted, controls commit dates,
  and can grind a commit whose id starts with any short prefix (28 bits take minutes on a CPU).
  Same-repository PRs may give a prefix (their authors already have write access).
* Otherwise (same-repository PRs, whose authors have write access) the run is refused when the head
  commit's committer date is later than the comment: someone pushed after the comment was written.
* Either way the run is pinned to the head SHA read here; the GPU job checks out exactly that commit, and
  the 🚀 reply names it in full.

Fork PRs (the fork label, ``/precision rerun sha=...``) also need an approving review *of that head* by a
person with the ``rerun`` role (precisionbot.gh.approval): the label or the command only says "run it",
the review's ``commit_id`` says which commit someone read. A fast-forward push between the review and the
label leaves a head nobody approved, and the run is refused.

People without the ``rerun`` role get one 😕 reaction on their command and nothing else: a reply would be a
comment an outsider can make the bot write (with whatever it quotes), while a reaction is one per comment
(GitHub keeps one of each kind per user), notifies nobody and quotes nothing, yet tells a refusal from a bot
that is down. The reason is in the log.

A fork-label run refused because nobody approved the head in a review gets one reply, to the person who
added the label (the ``rerun`` role: an outsider cannot cause it), naming the head; its :attr:`Decision.reply_marker`
is keyed by that SHA, so adding the label again on the same head does not repeat it.

Baseline mode (recording golden baselines) only ever runs on the default branch's code, for the
``permissions.baseline`` role: ``/precision baseline``, a push to the default branch, the schedule (which
GitHub runs on the default branch), and ``workflow_dispatch`` of the baseline suite *from the default
branch* by someone with that role. ``/precision accept`` too: the PR must be merged, into the default branch
(its ``base.ref``), and its merge commit must still be in that branch's history (GitHub's compare of the
branch head with the merge commit says ``behind`` or ``identical``). Merged alone is not enough: a writer
can merge a PR into a branch of their own, a backport merges into a release branch, and a force-push can
drop a merge from the default branch; each merge commit's numbers would become main's golden baseline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from precisionbot.config import Config
from precisionbot.errors import ConfigError
from precisionbot.gh import consumer
from precisionbot.gh.api import PERMISSION_RANK, IssueEvent, PullInfo, Review
from precisionbot.gh.approval import approvers
from precisionbot.gh.event import Event
from precisionbot.gh.matrix import build_matrix
from precisionbot.gh.slash import USAGE, Malformed, SlashCommand, parse_command
from precisionbot.untrusted import FULL_SHA

PR_ACTIONS = ("opened", "synchronize", "reopened", "labeled")
EYES, ROCKET, CONFUSED = "eyes", "rocket", "confused"


@dataclass(frozen=True)
class Needs:
    """Facts :func:`decide` will read for this event (everything else may stay None)."""

    files: bool = False
    pull: bool = False
    permission_of: str | None = None
    commit_date: bool = False
    default_head: bool = False
    merge_in_default: bool = False
    """accept: compare the PR's merge commit with the default branch's head (when it merged into that branch)."""
    workflow_run: bool = False
    """Find the PR of a consumed run, its issue events, then what its ``pull_request`` rules need."""
    reviews: bool = False
    """The PR's reviews and the roles of those who approved its head (fork PRs only)."""
    command: SlashCommand | Malformed | None = None
    """The parsed slash command (parsed once, here)."""


@dataclass(frozen=True)
class Facts:
    bot_login: str = ""
    matched_path: str | None = None
    """The first changed file that matches ``github.paths`` (None = none does)."""
    pull: PullInfo | None = None
    permission: str | None = None
    head_committed_at: datetime | None = None
    default_head: str | None = None
    merge_status: str | None = None
    """accept: GitHub's compare status of the default branch's head (base) with the PR's merge commit (head):
    ``behind`` or ``identical`` when the merge commit is in the branch's history."""
    run_pulls: tuple[PullInfo, ...] = ()
    """workflow_run: the open PRs found for the run's head, as GitHub reports them now."""
    run_events: tuple[IssueEvent, ...] = ()
    """workflow_run: the picked PR's issue events (who labelled what, when)."""
    reviews: tuple[Review, ...] = ()
    """Fork PRs: the PR's submitted reviews, oldest first."""
    reviewer_permissions: tuple[tuple[str, str], ...] = ()
    """Fork PRs: ``(login, role)`` of each person whose latest review approves the head."""


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str
    """One sentence for the log and the ``reason`` output."""
    sha: str = ""
    pr: int | None = None
    suite: str = ""
    mode: str = ""
    """``check`` (judge a commit) or ``baseline`` (record golden baselines); empty when not running."""
    matrix: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"include": []})
    reactions: tuple[str, ...] = ()
    """Reactions on the triggering comment, in order (👀 comes first, on receipt)."""
    reply: str | None = None
    """A short reply comment (refusals, malformed commands, help)."""
    bisect_good: str = ""
    """mode ``bisect``: the known-good commit the commenter named (empty: the PR's merge base)."""
    accept_reason: str = ""
    """mode ``accept``: why the numbers changed, and who accepted them (``accepted_by``)."""
    accepted_by: str = ""
    reply_marker: str = ""
    """When set, ``reply`` is posted only if no comment of ours carries this marker yet (a reply that must not
    repeat: the fork head that needs a review, keyed by its SHA)."""


def _skip(reason: str) -> Decision:
    return Decision(run=False, reason=reason)


def _is_bot(event: Event, bot_login: str) -> bool:
    return event.comment_user_type == "Bot" or event.comment_user == bot_login


def needs(event: Event, config: Config, bot_login: str) -> Needs:
    gh = config.github
    if event.name == "pull_request" and event.action in PR_ACTIONS:
        if event.action == "labeled":
            wanted = event.label in (gh.run_label, gh.fork_label)
            fork_run = wanted and event.is_fork and event.label == gh.fork_label
            return Needs(permission_of=event.sender if wanted else None, reviews=fork_run)
        return Needs(files=not event.is_fork and bool(gh.paths) and gh.run_label not in event.labels)
    if event.name == "issue_comment" and event.action == "created" and event.is_pull:
        if _is_bot(event, bot_login):
            return Needs()
        command = parse_command(event.comment_body)
        if command is None:
            return Needs()
        # The commenter's role first, for every command (help and malformed ones too): without the rerun role
        # the bot does not answer at all.
        if not isinstance(command, SlashCommand) or command.verb == "help":
            return Needs(command=command, permission_of=event.comment_user)
        if command.verb == "baseline":
            return Needs(command=command, permission_of=event.comment_user, default_head=True)
        if command.verb == "accept":
            return Needs(
                command=command, permission_of=event.comment_user, pull=True, default_head=True, merge_in_default=True
            )
        if command.verb == "bisect":
            return Needs(command=command, permission_of=event.comment_user, pull=True)
        return Needs(command=command, permission_of=event.comment_user, pull=True, commit_date=True, reviews=True)
    if event.name == "workflow_dispatch":
        return Needs(permission_of=event.sender)
    if event.name == "workflow_run":
        return Needs(workflow_run=consumer.precheck(event) is None)
    return Needs()


def decide(event: Event, facts: Facts, config: Config) -> Decision:
    if event.name == "pull_request":
        return _pull_request(event, facts, config)
    if event.name == "pull_request_target":
        return _skip("pull_request_target is not supported: it would run PR code with a write token")
    if event.name == "issue_comment":
        return _comment(event, facts, config)
    if event.name == "workflow_run":
        return _workflow_run(event, facts, config)
    if event.name == "push":
        branch = f"refs/heads/{event.default_branch}" if event.default_branch else None
        if event.ref != branch or not event.after or set(event.after) == {"0"}:
            return _skip(f"push to {event.ref}: baselines refresh only from the default branch")
        return _run(config, config.github.baseline_suite, event.after, None, "push to the default branch")
    if event.name in ("schedule", "workflow_dispatch") and not event.sha:
        raise ConfigError(f"GITHUB_SHA is not set: a {event.name} run needs the commit it runs on")
    if event.name == "schedule":
        return _run(config, config.github.baseline_suite, event.sha or "", None, "scheduled baseline refresh")
    if event.name == "workflow_dispatch":
        return _dispatch(event, facts, config)
    return _skip(f"event {event.name!r} does not trigger precisionbot")


def _dispatch(event: Event, facts: Facts, config: Config) -> Decision:
    """A manual run: the suite's own rules, and baseline mode only as ``/precision baseline`` allows it (the
    baseline role, the default branch): anyone with write may dispatch a workflow on any branch."""
    gh = config.github
    suite = event.inputs.get("suite") or gh.pr_suite
    models = tuple(m for m in event.inputs.get("models", "").split(",") if m)
    pr = event.inputs.get("pr")
    baseline = suite == gh.baseline_suite
    required = gh.permissions.baseline if baseline else gh.permissions.rerun
    if not _allowed(facts.permission, required):
        return _skip(
            f"{event.sender} ({facts.permission or 'none'}) may not dispatch suite {suite!r}: it needs the "
            f"{required} role"
        )
    branch = f"refs/heads/{event.default_branch}" if event.default_branch else None
    if baseline and (branch is None or event.ref != branch):
        return _skip(
            f"suite {suite!r} records baselines: dispatch it from the default branch ({branch or 'unknown'}), "
            f"not {event.ref or 'an unknown ref'}"
        )
    reason = f"manual run by {event.sender}"
    return _run(config, suite, event.sha or "", int(pr) if pr and pr.isdigit() else None, reason, models)


def _run(
    config: Config,
    suite: str,
    sha: str,
    pr: int | None,
    reason: str,
    models: tuple[str, ...] = (),
    checks: tuple[str, ...] = (),
    samples: int | None = None,
    reactions: tuple[str, ...] = (),
) -> Decision:
    matrix = build_matrix(config, suite, models, checks, samples)
    mode = "baseline" if suite == config.github.baseline_suite else "check"
    return Decision(True, reason, sha, pr, suite, mode, matrix, reactions)


def _allowed(permission: str | None, required: str) -> bool:
    return PERMISSION_RANK.get(permission or "none", 0) >= PERMISSION_RANK[required]


def _pull_request(event: Event, facts: Facts, config: Config) -> Decision:
    gh = config.github
    if event.action not in PR_ACTIONS:
        return _skip(f"pull_request {event.action!r} does not trigger a run")
    sha, pr, suite = event.head_sha or "", event.pr, gh.pr_suite
    if event.action == "labeled":
        if event.label not in (gh.run_label, gh.fork_label):
            return _skip(f"label {event.label!r} does not request a run")
        if event.is_fork and event.label != gh.fork_label:
            return _skip(f"PR from a fork: only the {gh.fork_label!r} label allows a run")
        if not _allowed(facts.permission, gh.permissions.rerun):
            return _skip(f"{event.sender} ({facts.permission}) may not request runs by label")
        reason = f"label {event.label!r} added by {event.sender}"
        if event.is_fork:
            approver = approved_by(facts, sha, gh.permissions.rerun)
            if approver is None:
                refusal = _skip(_unreviewed(sha, gh.permissions.rerun, f"add the {gh.fork_label!r} label again"))
                return _tell_labeller(refusal, event, config)
            reason += f", head approved by {approver} in a review of that commit"
        decision = _run(config, suite, sha, pr, reason)
        return _skip(_shared_refusal(decision)) if event.is_fork and _on_shared_runner(decision) else decision
    if event.is_fork:
        return _skip(
            f"PR from a fork is not run automatically; a maintainer can add the {gh.fork_label!r} label "
            "or comment `/precision rerun sha=<head>`"
        )
    if gh.run_label in event.labels:
        return _run(config, suite, sha, pr, f"PR carries the {gh.run_label!r} label")
    if not gh.paths:
        return _run(config, suite, sha, pr, "every PR runs (no github.paths configured)")
    if facts.matched_path is None:
        return _skip("no changed file matches github.paths")
    return _run(config, suite, sha, pr, f"{facts.matched_path} matches github.paths")


def _workflow_run(event: Event, facts: Facts, config: Config) -> Decision:
    """A completed run of the PR gate workflow: the ``pull_request`` rules again, on GitHub's facts only
    (precisionbot.gh.consumer), never on what that run decided."""
    refusal = consumer.precheck(event)
    if refusal is not None:
        return _skip(refusal)
    pull = consumer.pick_pull(event, facts.run_pulls)
    if isinstance(pull, str):
        return _skip(pull)
    inner = consumer.as_pull_request(event, pull, facts.run_events)
    if inner.action == "labeled" and inner.label not in pull.labels:
        return _skip(f"PR #{pull.number}: the label {inner.label!r} that started run {event.run_id} was removed since")
    decision = _pull_request(inner, facts, config)
    started = f"label {inner.label!r} added by {inner.sender}" if inner.action == "labeled" else "a push"
    decision = replace(decision, reason=f"PR #{pull.number} run {event.run_id} ({started}): {decision.reason}")
    # A fork's run is a person's decision: name the commit it runs where they made it (same-repository runs
    # are automatic; their sticky comment names the commit).
    return replace(decision, reply=_pinned(decision)) if decision.run and inner.is_fork else decision


def approved_by(facts: Facts, head: str, required: str) -> str | None:
    """The first person whose latest review approves exactly ``head`` and who has the ``required`` role."""
    roles = dict(facts.reviewer_permissions)
    for user in approvers(facts.reviews, head):
        if _allowed(roles.get(user), required):
            return user
    return None


def _unreviewed(head: str, role: str, then: str) -> str:
    return (
        f"PR from a fork: nobody with the {role} role approved its head {head} in a review; review that commit "
        f"(approve it in GitHub's review), then {then}"
    )


UNREVIEWED_MARKER = "<!-- precisionbot:unreviewed head={sha} -->"
"""The fork-label refusal's marker: one reply per head SHA (a hex commit id, so the marker stays one comment)."""
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
"""A GitHub user login: the only text of the reply that is not ours, so anything else is not mentioned."""


def _tell_labeller(refusal: Decision, event: Event, config: Config) -> Decision:
    """The refusal of a fork-label run for want of a review, answered to the labeller on the PR: a maintainer
    who added the label otherwise sees nothing happen. Mentions only their login (dropped unless it is a
    valid one), names the head and says what to do; the marker keys it by the head so it is said once."""
    sha, gh = event.head_sha or "", config.github
    if event.pr is None or not FULL_SHA.fullmatch(sha):
        return refusal
    lead = f"@{event.sender}: this PR" if event.sender and _LOGIN.fullmatch(event.sender) else "This PR"
    label = gh.fork_label.replace("`", "ˋ")
    reply = (
        f"😕 {lead} comes from a fork and nobody with the **{gh.permissions.rerun}** role approved its "
        f"head `{sha}` in a review, so the `{label}` label did not start a run. Review that commit (approve it "
        "in GitHub's review), then add the label again: the run takes only the commit someone approved."
    )
    return replace(refusal, pr=event.pr, reply=reply, reply_marker=UNREVIEWED_MARKER.format(sha=sha))


def _refuse(reason: str, reply: str, usage: bool = False) -> Decision:
    body = reply + ("\n\n" + USAGE if usage else "")
    return Decision(run=False, reason=reason, reactions=(EYES, CONFUSED), reply=body)


def _comment(event: Event, facts: Facts, config: Config) -> Decision:
    if event.action != "created":
        return _skip(f"comment {event.action}: only new comments are read")
    if not event.is_pull:
        return _skip("comment on an issue, not a PR")
    if _is_bot(event, facts.bot_login):
        return _skip("comment by a bot")
    command = parse_command(event.comment_body)
    if command is None:
        return _skip("comment is not a /precision command")
    gh = config.github
    if not _allowed(facts.permission, gh.permissions.rerun):
        # 😕 and nothing more: a reply would let anyone make the bot write (and quote) on any PR.
        refusal = _skip(
            f"{event.comment_user} ({facts.permission or 'none'}) lacks the {gh.permissions.rerun} role: "
            "/precision commands from them get a 😕 reaction and no reply"
        )
        return replace(refusal, reactions=(CONFUSED,))
    if isinstance(command, Malformed):
        return _refuse("malformed command", f"😕 {command.problem}.", usage=True)
    if command.verb == "help":
        return Decision(run=False, reason="help", reactions=(EYES,), reply=USAGE)
    required = gh.permissions.baseline if command.verb in ("baseline", "accept") else gh.permissions.rerun
    if not _allowed(facts.permission, required):
        return _refuse(
            f"{event.comment_user} ({facts.permission}) may not {command.verb}",
            f"😕 `/precision {command.verb}` needs the **{required}** role or above; "
            f"`{event.comment_user}` has **{facts.permission or 'none'}**.",
        )
    try:
        if command.verb == "baseline":
            return _baseline(event, facts, config, command)
        if command.verb == "accept":
            return _accept(event, facts, config, command)
        if command.verb == "bisect":
            return _bisect(event, facts, config, command)
        return _rerun(event, facts, config, command)
    except ConfigError as exc:
        return _refuse(f"bad command: {exc}", f"😕 {exc}.", usage=True)


def _baseline(event: Event, facts: Facts, config: Config, command: SlashCommand) -> Decision:
    head = facts.default_head or ""
    if command.sha and not head.startswith(command.sha):
        return _refuse("default branch moved", f"😕 The default branch is at `{head}`, not `{command.sha}`.")
    reason = f"/precision baseline by {event.comment_user}"
    decision = _run(
        config, config.github.baseline_suite, head, event.pr, reason, command.models, reactions=(EYES, ROCKET)
    )
    return replace(decision, reply=_pinned(decision))


MERGED_IN = ("behind", "identical")
"""Compare statuses of (default branch head ... merge commit) that put the merge commit in the branch's history."""


def _accept(event: Event, facts: Facts, config: Config, command: SlashCommand) -> Decision:
    """Record the merged commit's numbers as the new baseline, with the audit record: only once merged into
    the default branch and still in its history (the numbers of any other commit would become the reference
    of code the default branch never ran; see the module docstring)."""
    pull = facts.pull
    assert pull is not None, "needs() asks for the pull on accept"
    if not pull.merged or not pull.merge_commit_sha:
        return _refuse(
            "PR not merged",
            "😕 `/precision accept` records a merged PR's numbers as the new baseline: merge it, then comment again.",
        )
    default = event.default_branch
    if not default or pull.base_ref != default:
        into, main = pull.base_ref or "an unknown branch", default or "the default branch"
        return _refuse(
            f"PR #{pull.number} merged into {into}, not {main}",
            f"😕 PR #{pull.number} was merged into `{into}`, not `{main}`: only merges into {main} may be accepted.",
        )
    if facts.merge_status not in MERGED_IN:
        head = facts.default_head or "unknown"
        return _refuse(
            f"merge commit {pull.merge_commit_sha} is not in {default}'s history ({facts.merge_status})",
            f"😕 The merge commit `{pull.merge_commit_sha}` of PR #{pull.number} is not in the history of "
            f"`{default}` (at `{head}`; GitHub compares them as {facts.merge_status or 'unknown'}): only a "
            f"merge that {default} still contains may be accepted.",
        )
    reason = f"/precision accept by {event.comment_user}"
    decision = _run(config, config.github.baseline_suite, pull.merge_commit_sha, pull.number, reason, command.models)
    decision = replace(
        decision,
        mode="accept",
        reactions=(EYES, ROCKET),
        accept_reason=command.reason or "",
        accepted_by=event.comment_user or "",
    )
    return replace(decision, reply=_pinned(decision))


def _bisect(event: Event, facts: Facts, config: Config, command: SlashCommand) -> Decision:
    """Bisect the PR's own commits on a GPU runner: it builds each of them, so never a fork's."""
    pull = facts.pull
    assert pull is not None, "needs() asks for the pull on bisect"
    if pull.is_fork:
        return _refuse(
            "fork PR bisect", "😕 `/precision bisect` builds every commit of the PR: not for PRs from forks."
        )
    reason = f"/precision bisect by {event.comment_user}"
    decision = _run(config, config.github.pr_suite, pull.head_sha, pull.number, reason, command.models, command.checks)
    decision = replace(decision, mode="bisect", reactions=(EYES, ROCKET), bisect_good=command.good or "")
    return replace(decision, reply=_pinned(decision))


def _rerun(event: Event, facts: Facts, config: Config, command: SlashCommand) -> Decision:
    pull = facts.pull
    assert pull is not None, "needs() asks for the pull on rerun"
    if pull.state != "open":
        return _refuse("PR is not open", "😕 This PR is closed; reopen it to run the checks.")
    if pull.is_fork and (command.sha is None or not FULL_SHA.fullmatch(command.sha)):
        # A short prefix is no pin for untrusted code: a colliding commit can be ground and force-pushed.
        given = "without `sha=`" if command.sha is None else f"with the short `sha={command.sha}`"
        return _refuse(
            "fork PR without a full sha=",
            f"😕 This PR comes from a fork and the command came {given}: review its head, then name it in "
            f"full with `/precision rerun sha={pull.head_sha}` so later pushes cannot ride on your approval.",
        )
    if command.sha is not None and not pull.head_sha.startswith(command.sha):
        return _refuse(
            "head moved",
            f"😕 The PR head is now `{pull.head_sha}`, not `{command.sha}`: review the new commits and comment again.",
        )
    if pull.is_fork and approved_by(facts, pull.head_sha, config.github.permissions.rerun) is None:
        role = config.github.permissions.rerun
        return _refuse(
            "fork PR head not approved",
            f"😕 Nobody with the **{role}** role approved `{pull.head_sha}` in a review. Review that commit "
            "(approve it in GitHub's review), then comment again: the run takes only the commit you approved.",
        )
    if (
        command.sha is None
        and facts.head_committed_at is not None
        and event.comment_created_at is not None
        and facts.head_committed_at > event.comment_created_at
    ):
        return _refuse(
            "head moved",
            f"😕 The PR head `{pull.head_sha[:12]}` was committed after your comment; comment again to run it.",
        )
    reason = f"/precision rerun by {event.comment_user}"
    reactions = (EYES, ROCKET)
    planned = _run(config, config.github.pr_suite, pull.head_sha, pull.number, reason, command.models)
    if pull.is_fork and _on_shared_runner(planned):
        return _refuse("fork PR on a shared runner", f"😕 {_shared_refusal(planned)}.")
    decision = _run(
        config,
        config.github.pr_suite,
        pull.head_sha,
        pull.number,
        reason,
        command.models,
        command.checks,
        command.samples,
        reactions,
    )
    return replace(decision, reply=_pinned(decision))


_SHARED_KINDS = {
    "pool": "a persistent pool (runner.kind: pool): fork code would persist on the machine and poison later runs",
    "slurm": "a Slurm cluster (runner.kind: slurm): fork code would run as the cluster account, with its shared "
    "filesystem and network",
}
"""Runner kinds whose machine outlives the job or is shared with other work: never for fork code."""


def _shared_refusal(decision: Decision) -> str:
    kind = next(
        cell["runner"]["kind"] for cell in decision.matrix["include"] if cell["runner"]["kind"] in _SHARED_KINDS
    )
    return (
        f"This PR comes from a fork and the configured runner is {_SHARED_KINDS[kind]}. Use runner.kind: ec2 "
        "(one fresh instance per job) or host (one fresh container per job on your own GPU hosts)"
    )


def _on_shared_runner(decision: Decision) -> bool:
    return any(cell["runner"]["kind"] in _SHARED_KINDS for cell in decision.matrix["include"])


def _pinned(decision: Decision) -> str:
    """The 🚀 reply: the exact commit the GPU job will check out, so the commenter can compare it with the
    one they reviewed."""
    return f"🚀 Running suite `{decision.suite}` ({decision.mode}) on commit `{decision.sha}`."
