"""``precisionbot github plan``, ``github comment`` and ``github bisect-comment``: the GitHub side's composition root.

``main``-style handlers read the environment once into :class:`ActionEnv`, build the real adapter
(PyGithub) and call ``plan_action`` / ``comment_action``, which take everything as arguments (tests pass a
fake-server adapter). Nothing below the handlers reads ``os.environ``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from precisionbot import envvars
from precisionbot.config import load_config_or_default
from precisionbot.errors import ConfigError, GitHubError

DEFAULT_API_URL = "https://api.github.com"


@dataclass(frozen=True)
class ActionEnv:
    """The GitHub Actions environment (the variables docs/github.md lists), read once at the root."""

    token: str | None = None
    """``PRECISIONBOT_GITHUB_TOKEN``, else ``GITHUB_TOKEN``."""
    api_url: str = DEFAULT_API_URL
    server_url: str = "https://github.com"
    repository: str | None = None
    event_name: str | None = None
    event_path: str | None = None
    sha: str | None = None
    run_id: str | None = None
    output: str | None = None
    step_summary: str | None = None
    config_path: str | None = None
    """``PRECISIONBOT_CONFIG``: the config file (default ``.github/precision.yml`` when it exists)."""
    bot_login: str = "github-actions[bot]"
    """``PRECISIONBOT_BOT_LOGIN``: our login when the token may not call ``GET /user`` (Actions' token)."""
    report_url: str | None = None
    """``PRECISIONBOT_REPORT_URL``: the uploaded HTML report, linked as "full report" (upload-artifact's
    ``artifact-url`` output)."""

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> ActionEnv:
        def get(name: str) -> str | None:
            return env.get(name) or None

        return cls(
            token=get(envvars.GITHUB_TOKEN) or get("GITHUB_TOKEN"),
            api_url=get("GITHUB_API_URL") or DEFAULT_API_URL,
            server_url=get("GITHUB_SERVER_URL") or "https://github.com",
            repository=get("GITHUB_REPOSITORY"),
            event_name=get("GITHUB_EVENT_NAME"),
            event_path=get("GITHUB_EVENT_PATH"),
            sha=get("GITHUB_SHA"),
            run_id=get("GITHUB_RUN_ID"),
            output=get("GITHUB_OUTPUT"),
            step_summary=get("GITHUB_STEP_SUMMARY"),
            config_path=get(envvars.CONFIG),
            bot_login=get(envvars.BOT_LOGIN) or "github-actions[bot]",
            report_url=get(envvars.REPORT_URL),
        )

    @property
    def run_url(self) -> str | None:
        if not (self.repository and self.run_id):
            return None
        return f"{self.server_url.rstrip('/')}/{self.repository}/actions/runs/{self.run_id}"

    def require(self, *names: str) -> None:
        missing = [n for n in names if not getattr(self, n)]
        if missing:
            env_names = {
                "token": "GITHUB_TOKEN",
                "repository": "GITHUB_REPOSITORY",
                "event_name": "GITHUB_EVENT_NAME",
                "event_path": "GITHUB_EVENT_PATH",
            }
            wanted = ", ".join(env_names.get(n, n) for n in missing)
            raise ConfigError(f"{wanted} not set; run inside GitHub Actions or export it")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "github", help="the GitHub side: plan (the gate), comment (sticky comment), bisect-comment"
    )
    sub = parser.add_subparsers(dest="github_command", metavar="ACTION")
    sub.required = True
    plan = sub.add_parser("plan", help="apply the gate to the GitHub event; write run/sha/pr/suite/matrix/reason")
    plan.add_argument("--config", help=f"precisionbot config (default: ${envvars.CONFIG}, .github/precision.yml)")
    plan.set_defaults(handler=_plan)
    comment = sub.add_parser("comment", help="upsert the sticky PR comment and write the job summary")
    comment.add_argument("dirs", nargs="+", metavar="DIR", help="result directories (one per matrix cell)")
    comment.add_argument("--pr", type=_pr_number, help="PR number (default: from the event)")
    comment.add_argument("--suite", help="suite name, for one comment per suite (github.comment_per_suite)")
    comment.add_argument("--config", help=f"precisionbot config (default: ${envvars.CONFIG}, .github/precision.yml)")
    comment.add_argument(
        "--sha",
        type=_full_sha,
        help="the commit the plan pinned (its sha output): shown as the tested commit, and the comment is posted "
        "only while it is still the PR's head",
    )
    comment.set_defaults(handler=_comment)
    bisect = sub.add_parser(
        "bisect-comment",
        help="render the /precision bisect comment from each DIR/bisect.json and upsert it (one per PR)",
        description="Reads DIR/bisect.json of each matrix cell (written by `precisionbot bisect --out` on the GPU "
        "runner: untrusted), validates it, renders one escaped comment and upserts it under its own marker. "
        "Exit 0 every cell named one commit, 2 otherwise, 3 when GitHub refuses.",
    )
    bisect.add_argument(
        "dirs", nargs="*", metavar="DIR", help="the cells' result folders (none: a 'no result' comment)"
    )
    bisect.add_argument("--pr", type=_pr_number, help="PR number (default: from the event)")
    bisect.add_argument("--sha", type=_full_sha, help="the plan's pinned commit: each bisect's bad end must be it")
    bisect.set_defaults(handler=_bisect_comment)


def _full_sha(text: str) -> str:
    from precisionbot.gh.pinning import check_pinned_sha

    try:
        return check_pinned_sha(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pr_number(text: str) -> int:
    """``--pr``: ASCII digits from 1 (``int()`` would take ``"٧"`` as 7 and ``" 7\n"`` as 7)."""
    from precisionbot.gh.event import digits

    number = digits(text)
    if not number:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a PR number (ASCII digits, 1 or more)")
    return number


def _connect(env: ActionEnv) -> Any:
    from precisionbot.gh.rest import connect

    env.require("token", "repository")
    return connect(env.token or "", env.repository or "", env.api_url, login_fallback=env.bot_login)


def _plan(args: Any) -> int:
    env = ActionEnv.from_mapping(os.environ)
    config = load_config_or_default(args.config or env.config_path)
    env.require("event_name", "event_path")
    return plan_action(env, config, _connect(env) if env.token else None)


def _comment(args: Any) -> int:
    env = ActionEnv.from_mapping(os.environ)
    config = load_config_or_default(args.config or env.config_path)
    api = _connect(env) if env.token and env.repository else None
    from precisionbot.config import config_digest

    trusted = config_digest(args.config or env.config_path)
    return comment_action(
        env, config, api, args.dirs, pr=args.pr, suite=args.suite, trusted_config=trusted, sha=args.sha
    )


def _bisect_comment(args: Any) -> int:
    from precisionbot.commands.github_bisect import bisect_comment_action

    env = ActionEnv.from_mapping(os.environ)
    api = _connect(env) if env.token and env.repository else None
    pr = args.pr if args.pr is not None else _pr_from_event(env)
    return bisect_comment_action(
        api, args.dirs, pr=pr, sha=args.sha, run_url=env.run_url, step_summary=env.step_summary, output=env.output
    )


def read_payload(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise ConfigError(f"cannot read the event payload GITHUB_EVENT_PATH={path}: {why}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"the event payload {path} is not a JSON object")
    return data


def plan_action(env: ActionEnv, config: Any, api: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    from precisionbot.gh.event import parse_event
    from precisionbot.gh.matrix import with_runner_labels
    from precisionbot.gh.plan import run_plan
    from precisionbot.gh.workflow import command, log_text, write_outputs

    event = parse_event(env.event_name or "", read_payload(env.event_path or ""), env.sha)
    if api is None:
        raise ConfigError("GITHUB_TOKEN not set; give the plan step a token (contents: read is enough)")
    outcome = run_plan(event, api, config)
    d = outcome.decision
    for warning in outcome.warnings:
        print(command("warning", warning), file=out)
    values = {
        "run": "true" if d.run else "false",
        "sha": d.sha,
        "pr": "" if d.pr is None else str(d.pr),
        "suite": d.suite,
        "mode": d.mode,
        "matrix": json.dumps(with_runner_labels(d.matrix, secrets.token_hex(16)), separators=(",", ":")),
        "reason": d.reason,
        "bisect_good": d.bisect_good,
        "accept_reason": d.accept_reason,
        "accepted_by": d.accepted_by,
    }
    print(f"precisionbot: {'run' if d.run else 'skip'}: {log_text(d.reason)}", file=out)
    print(write_outputs(values, env.output), end="", file=out)
    return 0


def _pr_from_event(env: ActionEnv) -> int | None:
    from precisionbot.gh.event import pr_of

    if not env.event_path or not Path(env.event_path).is_file():
        return None
    return pr_of(read_payload(env.event_path))


def comment_action(
    env: ActionEnv,
    config: Any,
    api: Any,
    dirs: Sequence[str],
    *,
    pr: int | None = None,
    suite: str | None = None,
    out: TextIO | None = None,
    trusted_config: str | None = None,
    sha: str | None = None,
    links: Any = None,
    no_pr_reason: str | None = None,
) -> int:
    """``trusted_config``: the digest of the config this job read (the base branch's); results that recorded
    another one get a warning in the comment (None: no comparison). ``sha``: the commit the plan pinned; the
    comment shows it (never the commit ``result.json`` claims) and is posted only while it is the PR's head
    (precisionbot.gh.pinning). Without it (local runs) the results' own commit is shown and nothing is checked.
    ``links``: the report's ``ReportLinks`` when the run is not an Actions run (``buildkite post``: the build's
    page); None derives them from ``env``. ``no_pr_reason``: why there is no PR to comment on, said instead of
    the flag hint when ``pr`` is None (a Buildkite build of a branch)."""
    out = out or sys.stdout
    from precisionbot.gh.pinning import foreign_commit_note, pin_run, stale_reason, trusted_artifact_url
    from precisionbot.gh.sticky import upsert_comment
    from precisionbot.gh.workflow import command, log_block, log_text, write_outputs, write_summary
    from precisionbot.report import ReportLinks, ReportSection, comment_marker, render_comment, render_summary
    from precisionbot.report.load import load_sections
    from precisionbot.results import Verdict

    # Results come from the job that ran PR code: parsed as JSON and capped NumPy arrays (no pickles), never
    # run; each verdict re-derived with this (trusted) config's thresholds; a damaged cell renders as such.
    sections = [
        ReportSection(label=_label(directory, s.run), run=s.run, records=s.records)
        for directory, s in zip(dirs, load_sections(dirs, thresholds=config.thresholds, warn=sys.stderr), strict=True)
    ]
    commit_note = None
    if sha is not None:
        odd = []
        for i, section in enumerate(sections):
            run, claimed_other = pin_run(section.run, sha)
            sections[i] = replace(section, run=run)
            if claimed_other:
                odd.append(section.label)
        commit_note = foreign_commit_note(odd, sha)
    verdict = Verdict.combine(s.run.verdict for s in sections)
    report_url = trusted_artifact_url(env.report_url, env.server_url, env.repository, env.run_id)
    if env.report_url and report_url is None:
        print(
            command(
                "warning",
                f"precisionbot: report-url {env.report_url[:200]!r} is not an artifact of this run "
                f"({env.run_url or 'GITHUB_RUN_ID unset'}/artifacts/...): not linked",
            ),
            file=out,
        )
    if links is None:
        links = ReportLinks(
            run_url=env.run_url,
            artifact_url=f"{env.run_url}#artifacts" if env.run_url else None,
            report_url=report_url,
        )
    marker = comment_marker(suite if config.github.comment_per_suite else None)
    from precisionbot.gh.provenance import foreign_config_note
    from precisionbot.report.render import GITHUB_COMMENT_MAX_CHARS

    config_note = None
    if trusted_config is not None:
        config_note = foreign_config_note(trusted_config, [(s.label, s.run.extra) for s in sections])
    note = "\n".join(n for n in (commit_note, config_note) if n) or None
    room = GITHUB_COMMENT_MAX_CHARS - len(note or "") - 2
    body = render_comment(sections, links=links, marker=marker, max_chars=room)
    if note:
        # Right under the marker line, above the verdict: the reader sees it before the numbers.
        head, sep, rest = body.partition("\n")
        body = f"{head}{sep}{note}\n{rest}" if head.strip() == marker else f"{note}\n{body}"
    if not write_summary(render_summary(sections, links=links), env.step_summary):
        print(log_block(body), file=out)
    pr = pr if pr is not None else _pr_from_event(env)
    url = ""
    if api is None or pr is None:
        why = no_pr_reason if no_pr_reason is not None and api is not None else _why_not_posted(env, api, pr)
        print(command("warning", f"precisionbot: PR comment skipped: {why}"), file=out)
        # Outside Actions the annotation above is just stdout noise: say it plainly where people look.
        print(f"precisionbot: the PR comment was not posted: {log_text(why)}", file=sys.stderr)
    else:
        try:
            stale = None if sha is None else stale_reason(sha, api.pull(pr).head_sha, pr)
            if stale is not None:
                print(command("warning", f"precisionbot: PR comment skipped: {stale}"), file=out)
            else:
                url = upsert_comment(api, pr, body, marker).comment.url
        except GitHubError as exc:
            print(command("warning", f"precisionbot: could not post the PR comment: {exc}"), file=out)
    print(write_outputs({"verdict": verdict.value, "comment-url": url}, env.output), end="", file=out)
    return verdict.exit_code


def _why_not_posted(env: ActionEnv, api: Any, pr: int | None) -> str:
    if api is None and not env.token:
        return f"no GITHUB_TOKEN (set GITHUB_TOKEN or {envvars.GITHUB_TOKEN})"
    if api is None:
        return "no GITHUB_REPOSITORY (set it to OWNER/NAME)"
    return "no PR number (pass --pr N, or run on a pull_request or issue_comment event)"


def _label(directory: str, run: Any) -> str:
    env = run.environment
    if env.get("model"):
        return f"{env['model']}@tp{env['tp']}" if env.get("tp") else str(env["model"])
    return Path(directory).name
