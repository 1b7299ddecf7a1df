"""``precisionbot buildkite pipeline``, ``buildkite post`` and ``buildkite trigger``: precisionbot on Buildkite.

* ``pipeline`` prints the pipeline YAML (``precisionbot.buildkite.pipeline``) for ``buildkite-agent pipeline
  upload``;
* ``post`` runs as that pipeline's last step: it reads the Buildkite job's environment
  (``precisionbot.buildkite.env``), then posts the same sticky comment as ``github comment``
  (``comment_action``, called with Buildkite's repository, PR and commit) and sets a commit status;
* ``trigger`` runs in a GitHub workflow on ``issue_comment``: the same gate as ``github plan`` (``run_plan``)
  decides, and an allowed ``/precision rerun`` becomes one Buildkite build of the pinned commit.

The handlers read the environment once and build the real adapters; ``post_action`` and ``trigger_action`` take
everything as arguments (tests pass adapters pointed at local fakes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from precisionbot import envvars
from precisionbot.config import load_config_or_default
from precisionbot.errors import ConfigError, GitHubError

if TYPE_CHECKING:
    from precisionbot.buildkite.env import BuildkiteEnv
    from precisionbot.commands.github import ActionEnv
    from precisionbot.config import Config
    from precisionbot.gh.api import StatusReportingApi

STATUS_STATES = {0: "success", 1: "failure", 2: "error"}
"""Our exit codes (pass, fail, inconclusive) as GitHub commit-status states."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "buildkite", help="Buildkite: pipeline (YAML to upload), post (comment + commit status), trigger (rerun)"
    )
    sub = parser.add_subparsers(dest="buildkite_command", metavar="ACTION")
    sub.required = True
    config_help = f"precisionbot config (default: ${envvars.CONFIG}, .github/precision.yml)"

    pipeline = sub.add_parser(
        "pipeline",
        help="print the pipeline YAML for `buildkite-agent pipeline upload`",
        description="One check step per model of the suite on the GPU queue, then a step on a small queue that "
        "posts the sticky PR comment and the commit status (docs/buildkite.md).",
    )
    pipeline.add_argument("--queue", help="the GPU agents' queue (default: buildkite.queue)")
    pipeline.add_argument(
        "--post-queue", default="default", help="queue of the posting step, never the GPU one (default: default)"
    )
    pipeline.add_argument("--config", help=config_help)
    pipeline.add_argument("--suite", help=f"suite (default: ${envvars.RERUN_SUITE}, else github.pr_suite)")
    pipeline.add_argument("--models", metavar="a,b", help=f"models (default: ${envvars.RERUN_MODELS}, else all)")
    pipeline.add_argument("--checks", metavar="a,b", help=f"checks (default: ${envvars.RERUN_CHECKS}, else suite's)")
    pipeline.add_argument("--samples", type=int, help=f"samples (default: ${envvars.RERUN_SAMPLES}, else suite's)")
    pipeline.add_argument("--timeout-minutes", type=int, default=100, help="each check step's limit (default 100)")
    pipeline.add_argument("--install", metavar="CMD", help="run before each check (e.g. 'pip install -e .')")
    pipeline.add_argument(
        "--token-secret", metavar="NAME", help="Buildkite secret holding the GitHub token, for the post step only"
    )
    pipeline.add_argument("--out", metavar="FILE", help="write the YAML here instead of stdout")
    pipeline.set_defaults(handler=_pipeline)

    post = sub.add_parser(
        "post",
        help="the last step: upsert the sticky PR comment and set the commit status from Buildkite's environment",
    )
    post.add_argument("dirs", nargs="+", metavar="DIR", help="result directories (one per check step)")
    post.add_argument("--config", help=config_help)
    post.add_argument("--suite", help="suite name, for one comment per suite (github.comment_per_suite)")
    post.set_defaults(handler=_post)

    trigger = sub.add_parser(
        "trigger",
        help="in a GitHub workflow on issue_comment: gate /precision rerun, then create the Buildkite build",
    )
    trigger.add_argument("--config", help=config_help)
    trigger.set_defaults(handler=_trigger)


# -- pipeline -------------------------------------------------------------------------------------------------


def _pipeline(args: Any) -> int:
    from precisionbot.buildkite.pipeline import PipelineOptions, build_pipeline, render_pipeline

    env = os.environ
    config = load_config_or_default(args.config or env.get(envvars.CONFIG))
    samples = args.samples if args.samples is not None else _int_env(env, envvars.RERUN_SAMPLES)
    options = PipelineOptions(
        queue=args.queue or config.buildkite.queue or "",
        post_queue=args.post_queue,
        config_path=args.config or env.get(envvars.CONFIG) or ".github/precision.yml",
        suite=args.suite or env.get(envvars.RERUN_SUITE) or None,
        models=_names(args.models or env.get(envvars.RERUN_MODELS)),
        checks=_names(args.checks or env.get(envvars.RERUN_CHECKS)),
        samples=samples,
        timeout_minutes=args.timeout_minutes,
        install=args.install,
        token_secret=args.token_secret,
    )
    text = render_pipeline(build_pipeline(config, options), command_line(options))
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise ConfigError(f"cannot write --out {args.out}: {exc.strerror or exc}") from exc
    else:
        sys.stdout.write(text)
    return 0


def command_line(options: Any) -> str:
    """The command that prints this pipeline, for its header (the flags that differ from the defaults)."""
    import shlex

    parts = ["precisionbot", "buildkite", "pipeline", "--queue", options.queue, "--post-queue", options.post_queue]
    if options.config_path != ".github/precision.yml":
        parts += ["--config", options.config_path]
    for flag, value in (("--suite", options.suite), ("--install", options.install)):
        if value:
            parts += [flag, value]
    for flag, names in (("--models", options.models), ("--checks", options.checks)):
        if names:
            parts += [flag, ",".join(names)]
    if options.samples is not None:
        parts += ["--samples", str(options.samples)]
    if options.timeout_minutes != 100:
        parts += ["--timeout-minutes", str(options.timeout_minutes)]
    if options.token_secret:
        parts += ["--token-secret", options.token_secret]
    return shlex.join(parts)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n for n in (text or "").split(",") if n)


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name) or ""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f"{name}={text[:20]!r} is not a number of samples")
    return int(text)


# -- post -----------------------------------------------------------------------------------------------------


def _post(args: Any) -> int:
    from precisionbot.buildkite.env import github_api_url, parse_env
    from precisionbot.commands.github import ActionEnv
    from precisionbot.config import config_digest
    from precisionbot.gh.rest import connect

    bk = parse_env(os.environ)
    token = os.environ.get(envvars.GITHUB_TOKEN) or os.environ.get("GITHUB_TOKEN")
    if not token:
        raise ConfigError(
            f"no GitHub token: give the post step {envvars.GITHUB_TOKEN} (a fine-grained token with "
            "pull-requests: write and statuses: write on the repository), e.g. with --token-secret"
        )
    api_url = github_api_url(bk.host, os.environ.get("GITHUB_API_URL"))
    config_path = args.config or os.environ.get(envvars.CONFIG)
    env = ActionEnv(
        token=token,
        api_url=api_url,
        server_url=f"https://{bk.host}",
        repository=bk.repository,
        config_path=config_path,
        bot_login=os.environ.get(envvars.BOT_LOGIN) or "github-actions[bot]",
    )
    config = load_config_or_default(config_path)
    api = connect(token, bk.repository, api_url, login_fallback=env.bot_login)
    return post_action(env, bk, config, api, args.dirs, suite=args.suite, trusted_config=config_digest(config_path))


def post_action(
    env: ActionEnv,
    bk: BuildkiteEnv,
    config: Config,
    api: StatusReportingApi,
    dirs: Sequence[str],
    *,
    suite: str | None = None,
    trusted_config: str | None = None,
    out: TextIO | None = None,
) -> int:
    """The sticky comment (``comment_action``, with the Buildkite build's PR, commit and page), then the commit
    status on ``bk.commit``. A build of a branch (no PR) sets the status only, and says why. Returns the
    verdict's exit code; GitHub refusing the comment or the status is a warning, as in ``github comment``."""
    out = out or sys.stdout
    from precisionbot.commands.github import comment_action
    from precisionbot.gh.workflow import command
    from precisionbot.report import ReportLinks
    from precisionbot.results import Verdict

    reason = bk.no_pr_reason()
    if reason is not None:
        print(f"precisionbot: {reason}", file=out)
    code = comment_action(
        env,
        config,
        api,
        dirs,
        pr=bk.pull_request,
        suite=suite,
        out=out,
        trusted_config=trusted_config,
        sha=bk.commit,
        links=ReportLinks(run_url=bk.build_url),
        no_pr_reason=reason,
    )
    verdict = next(v for v in Verdict if v.exit_code == code)
    context = f"precisionbot/{suite}" if suite and config.github.comment_per_suite else "precisionbot"
    try:
        api.create_status(
            bk.commit,
            STATUS_STATES[code],
            f"{verdict.value}" + (f" (suite {suite})" if suite else ""),
            context,
            bk.build_url,
        )
        print(f"precisionbot: commit status {context}={STATUS_STATES[code]} set on {bk.commit}", file=out)
    except GitHubError as exc:
        print(command("warning", f"precisionbot: could not set the commit status: {exc}"), file=out)
    return code


# -- trigger --------------------------------------------------------------------------------------------------


def _trigger(args: Any) -> int:
    from precisionbot.buildkite.api import RestBuildkite
    from precisionbot.commands.github import ActionEnv
    from precisionbot.gh.rest import connect

    env = ActionEnv.from_mapping(os.environ)
    config = load_config_or_default(args.config or env.config_path)
    env.require("token", "repository", "event_name", "event_path")
    bk = config.buildkite
    if not (bk.organization and bk.pipeline):
        raise ConfigError(
            f"{config.source}: buildkite.organization and buildkite.pipeline are not set: name the pipeline "
            "that /precision rerun starts (the slugs in https://buildkite.com/<organization>/<pipeline>)"
        )
    token = os.environ.get(envvars.BUILDKITE_TOKEN)
    if not token:
        raise ConfigError(
            f"{envvars.BUILDKITE_TOKEN} is not set: give this step a Buildkite API access token with the "
            "write_builds scope only (from a secret)"
        )
    gh = connect(env.token or "", env.repository or "", env.api_url, login_fallback=env.bot_login)
    return trigger_action(env, config, gh, RestBuildkite(token, bk.organization, bk.pipeline, bk.api_url))


def trigger_action(env: Any, config: Any, gh: Any, buildkite: Any, out: TextIO | None = None) -> int:
    """Apply the gate to the ``issue_comment`` event; when it runs a check, create one Buildkite build of the
    pinned commit (``precisionbot.buildkite.dispatch``). A refused Buildkite call is answered 😕 on the comment
    and raised (exit 3) with Buildkite's reason and the fix."""
    out = out or sys.stdout
    from precisionbot.buildkite.api import Build, BuildkiteError
    from precisionbot.buildkite.dispatch import build_request, head_moved, not_started, refuse_mode, started
    from precisionbot.commands.github import read_payload
    from precisionbot.gh.event import parse_event
    from precisionbot.gh.gate import Decision
    from precisionbot.gh.plan import run_plan
    from precisionbot.gh.workflow import command, log_text, write_outputs

    event = parse_event(env.event_name or "", read_payload(env.event_path or ""), env.sha)
    if event.name != "issue_comment":
        raise ConfigError(
            f"buildkite trigger answers issue_comment events (/precision rerun), not {event.name!r}: Buildkite's "
            "own GitHub webhook builds pushes and pull requests"
        )
    failures: list[BuildkiteError] = []
    builds: list[Build] = []

    def dispatch(decision: Decision) -> Decision:
        refused = refuse_mode(decision)
        if refused is not None or not decision.run or decision.pr is None:
            return refused or decision
        pull = gh.pull(decision.pr)
        moved = head_moved(decision, pull)
        if moved is not None:
            return moved
        try:
            build = buildkite.create_build(build_request(decision, pull, env.server_url))
        except BuildkiteError as exc:
            failures.append(exc)
            return not_started(decision, str(exc))
        builds.append(build)
        return started(decision, build)

    outcome = run_plan(event, gh, config, dispatch)
    for warning in outcome.warnings:
        print(command("warning", warning), file=out)
    d = outcome.decision
    print(f"precisionbot: {'run' if d.run else 'skip'}: {log_text(d.reason)}", file=out)
    values = {
        "run": "true" if d.run else "false",
        "sha": d.sha,
        "pr": "" if d.pr is None else str(d.pr),
        "build-url": builds[0].web_url if builds else "",
        "build-number": str(builds[0].number) if builds else "",
    }
    print(write_outputs(values, env.output), end="", file=out)
    if failures:
        raise failures[0]
    return 0
