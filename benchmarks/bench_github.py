"""Benchmark of the GitHub side (issue 7): the pure gate, and the HTTP work of `github plan` and the sticky
comment against the local fake GitHub through real PyGithub (no politeness pauses). Not a test.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_github.py [--repeat 3]

The fake answers from memory on 127.0.0.1, so the HTTP rows measure PyGithub + our adapter + request count,
not GitHub's latency (multiply the request counts by ~100-300 ms for github.com).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from datetime import datetime, timezone

from precisionbot.config import Config, GitHubConfig
from precisionbot.gh.api import PullInfo
from precisionbot.gh.event import Event
from precisionbot.gh.gate import Facts, decide
from precisionbot.gh.paths import first_match
from precisionbot.gh.rest import connect
from precisionbot.gh.sticky import upsert_comment
from tests.support.fake_github import FakeGitHub


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, best of {args.repeat}")
    print("| case | seconds | requests |\n| --- | ---: | ---: |")

    config = Config(github=GitHubConfig(paths=("**/layers/**", "sgl-kernel/**")))
    event = Event(
        name="issue_comment",
        action="created",
        pr=7,
        is_pull=True,
        comment_id=1,
        comment_body="/precision rerun models=builtin checks=match samples=8",
        comment_user="a",
        comment_user_type="User",
        comment_created_at=datetime(2026, 1, 2, tzinfo=timezone.utc),
    )
    facts = Facts(
        bot_login="bot",
        pull=PullInfo(7, "a" * 40, "o/r", "o/r", "b"),
        permission="write",
        head_committed_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )
    n = 10_000
    t = best_of(lambda: [decide(event, facts, config) for _ in range(n)], args.repeat)
    print(f"| gate: {n:,} slash-command decisions (pure) | {t:.3f} | 0 |")
    paths = [f"docs/page{i}.md" for i in range(3000)] + ["python/sglang/srt/layers/a.py"]
    t = best_of(lambda: first_match(paths, config.github.paths), args.repeat)
    print(f"| path filter: 3,001 files, match last (pure) | {t:.4f} | 0 |")

    with FakeGitHub() as fake:
        api = connect(fake.token or "", fake.repo, fake.url, backoff_s=0.001, throttle=False)
        fake.add_pull(7, files=paths)
        before = len(fake.requests)
        t = best_of(lambda: first_match(api.changed_files(7), config.github.paths), 1)
        print(f"| path filter over HTTP: 3,001 files (31 pages of 100) | {t:.3f} | {len(fake.requests) - before} |")
        for i in range(500):
            fake.add_comment(7, f"chatter {i}")
        api.bot_login()
        before = len(fake.requests)
        t = best_of(lambda: upsert_comment(api, 7, "report " * 1000), 1)
        print(f"| sticky comment, create (500 comments to search) | {t:.3f} | {len(fake.requests) - before} |")
        before = len(fake.requests)
        t = best_of(lambda: upsert_comment(api, 7, "report " * 1000), 1)
        print(f"| sticky comment, update (501 comments to search) | {t:.3f} | {len(fake.requests) - before} |")


if __name__ == "__main__":
    main()
