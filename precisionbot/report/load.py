"""Result directories → report sections (the report's only file I/O), and the links a workflow run has.

``load_sections`` is what ``precisionbot report`` and ``precisionbot github comment`` share.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from precisionbot import envvars
from precisionbot.config import ThresholdsConfig
from precisionbot.errors import ConfigError, DataError
from precisionbot.gh.workflow import log_text
from precisionbot.report.section import ReportSection
from precisionbot.report.verify import verify_run
from precisionbot.report.view import ReportLinks
from precisionbot.results import CheckResult, EngineInfo, RunResult, Verdict
from precisionbot.results.directory import read_records, read_result


def default_label(run: RunResult, directory: Path) -> str:
    """``<model> tp<N>`` when the run names a model, else the directory's name."""
    model = run.environment.get("model")
    if not model:
        return directory.resolve().name
    tp = run.environment.get("tp")
    return f"{model} tp{tp}" if tp not in (None, "") else str(model)


def damaged(directory: Path, problem: str) -> ReportSection:
    """A matrix cell whose result directory could not be read: INCONCLUSIVE, the problem as its reason."""
    run = RunResult(
        verdict=Verdict.INCONCLUSIVE,
        signature="",
        engine=EngineInfo(url="", kind="unknown"),
        checks=(CheckResult.inconclusive("result", f"damaged result directory: {problem}"),),
    )
    return ReportSection(label=directory.name or str(directory), run=run)


def _section(path: Path, label: str | None, before: RunResult | None, thresholds: ThresholdsConfig) -> ReportSection:
    if not path.exists():
        read_result(path)  # a mistyped DIR is a usage error (exit 3), not a damaged cell
    try:
        run = read_result(path)
        records = read_records(path)
    except DataError as exc:
        # The directory may come from a job that ran PR code: one damaged cell must not hide the others.
        return damaged(path, str(exc))
    verified = verify_run(run, thresholds, records)
    return ReportSection(
        label=label or default_label(run, path), run=verified, previous=before, records=records, directory=str(path)
    )


def _previous(path: str | Path, warn: TextIO | None) -> RunResult | None:
    try:
        return read_result(path)
    except DataError as exc:
        print(f"precisionbot: warning: {log_text(str(exc))}; no 'since the previous run'", file=warn or sys.stderr)
        return None


def load_sections(
    directories: Sequence[str | Path],
    *,
    previous: Sequence[str | Path] = (),
    labels: Sequence[str] = (),
    warn: TextIO | None = None,
    thresholds: ThresholdsConfig | None = None,
) -> list[ReportSection]:
    """One section per result directory; ``previous[i]`` (optional) is the previous run of ``directories[i]``.

    Each run's verdicts are re-derived with ``thresholds`` (the trusted config's; default thresholds when
    None) by ``precisionbot.report.verify``; a directory that cannot be read becomes a damaged section."""
    if not directories:
        raise ConfigError("no result directory given: pass one or more DIRs written by `precisionbot check --out`")
    if len(previous) > len(directories):
        raise ConfigError(f"--previous given {len(previous)} times for {len(directories)} result directories")
    if len(labels) > len(directories):
        raise ConfigError(f"--label given {len(labels)} times for {len(directories)} result directories")
    trusted = thresholds or ThresholdsConfig()
    sections = []
    for i, d in enumerate(directories):
        before = _previous(previous[i], warn) if i < len(previous) else None
        sections.append(_section(Path(d), labels[i] if i < len(labels) else None, before, trusted))
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
            directory=s.directory,
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
        artifact_url=env.get(envvars.ARTIFACT_URL) or None,
        report_url=env.get(envvars.REPORT_URL) or None,
    )
