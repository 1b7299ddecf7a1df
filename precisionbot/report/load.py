"""Result directories → report sections (the report's only file I/O), and the links a workflow run has.

``load_sections`` is what ``precisionbot report`` and ``precisionbot github comment`` share.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from precisionbot.errors import ConfigError, DataError
from precisionbot.report.view import ReportLinks, ReportSection
from precisionbot.resultdir import read_records, read_result
from precisionbot.results import PositionRecord, RunResult


def default_label(run: RunResult, directory: Path) -> str:
    """``<model> tp<N>`` when the run names a model, else the directory's name."""
    model = run.environment.get("model")
    if not model:
        return directory.resolve().name
    tp = run.environment.get("tp")
    return f"{model} tp{tp}" if tp not in (None, "") else str(model)


def _records(directory: Path, warn: TextIO | None) -> dict[str, PositionRecord]:
    try:
        return read_records(directory)
    except DataError as exc:
        # The arrays only feed the heat strips: a damaged artifact must not block the comment itself.
        print(f"precisionbot: warning: {exc}; the report has no per-position picture", file=warn or sys.stderr)
        return {}


def load_sections(
    directories: Sequence[str | Path],
    *,
    previous: Sequence[str | Path] = (),
    labels: Sequence[str] = (),
    warn: TextIO | None = None,
) -> list[ReportSection]:
    """One section per result directory; ``previous[i]`` (optional) is the previous run of ``directories[i]``."""
    if not directories:
        raise ConfigError("no result directory given: pass one or more DIRs written by `precisionbot check --out`")
    if len(previous) > len(directories):
        raise ConfigError(f"--previous given {len(previous)} times for {len(directories)} result directories")
    if len(labels) > len(directories):
        raise ConfigError(f"--label given {len(labels)} times for {len(directories)} result directories")
    sections = []
    for i, d in enumerate(directories):
        path = Path(d)
        run = read_result(path)
        before = read_result(previous[i]) if i < len(previous) else None
        label = labels[i] if i < len(labels) else default_label(run, path)
        sections.append(ReportSection(label=label, run=run, previous=before, records=_records(path, warn)))
    seen: dict[str, int] = {}
    for s in sections:
        seen[s.label] = seen.get(s.label, 0) + 1
    # Two cells of a matrix with one label would be indistinguishable: add the directory name.
    return [
        s
        if seen[s.label] == 1
        else ReportSection(
            label=f"{s.label} ({Path(directories[i]).name})",
            run=s.run,
            previous=s.previous,
            records=s.records,
        )
        for i, s in enumerate(sections)
    ]


def links_from_env(env: Mapping[str, str]) -> ReportLinks:
    """The workflow run's page from GitHub Actions' variables (empty links outside Actions).

    ``PRECISIONBOT_ARTIFACT_URL`` names the uploaded results and ``PRECISIONBOT_REPORT_URL`` the uploaded
    HTML report, when the workflow knows them.
    """
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repo, run_id = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
    run_url = f"{server}/{repo}/actions/runs/{run_id}" if repo and run_id else None
    return ReportLinks(
        run_url=run_url,
        artifact_url=env.get("PRECISIONBOT_ARTIFACT_URL") or None,
        report_url=env.get("PRECISIONBOT_REPORT_URL") or None,
    )
