"""A result's findings ("What it points to"), put together in one place so that every output says the same.

The PR comment, the job summary and the HTML report (all three through :mod:`precisionbot.report.view`),
``report --format json`` (:mod:`precisionbot.report.render`) and the ``diagnosis`` that ``check`` and ``demo``
write into result.json all take their findings from :func:`findings`. Each once spelled out its own call to
:func:`~precisionbot.report.diagnosis.diagnose`, and they drifted: the JSON lost the localized op
(``first_diverging_op``) that the comment showed. What the findings are built from — the checks, the engine's
environment, result.json's ``localization``, the baseline (or noise band) and the previous run — is decided here
and nowhere else.

Pure: a section in, :class:`~precisionbot.results.Diagnosis` tuples out; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from precisionbot.report.diagnosis import BaselineStats, diagnose
from precisionbot.report.golden import zero_band
from precisionbot.report.section import ReportSection
from precisionbot.results import Diagnosis


def findings(section: ReportSection) -> tuple[Diagnosis, ...]:
    """The findings of one section (one result directory, as :mod:`precisionbot.report.load` reads it), most
    telling first: the localized op when the run localized a failure, which helper diverged, onset, spread,
    top-1 flips, then what moved against the baseline and the previous run.

    A run without checks (an old or hand-written result.json) keeps the diagnosis it was stored with: there
    is nothing to recompute it from."""
    run = section.run
    if not run.checks:
        return run.diagnosis
    return diagnose(
        run.checks,
        baseline_stats=compared_with(section)[0],
        previous=section.previous,
        environment=run.environment,
        localization=run.extra.get("localization"),
    )


def compared_with(section: ReportSection) -> tuple[BaselineStats | None, str]:
    """What "vs baseline" compares with — the section's own stats, else ``run.baseline["stats"]``, else the
    golden check's noise band (its KL p99 is what two known-good builds differ by) — and what a table cell
    calls it (``baseline`` or ``band``). The findings and the verdict table must compare with the same thing."""
    if section.baseline_stats is not None:
        return section.baseline_stats, "baseline"
    stats = (section.run.baseline or {}).get("stats")
    if isinstance(stats, Mapping) and stats and all(isinstance(v, Mapping) for v in stats.values()):
        return stats, "baseline"
    golden = section.run.check("golden")
    band = golden.stats.get("band") if golden is not None else None
    # A zero band (producers bit-identical) holds a floor, not a measurement: nothing to compare with.
    if isinstance(band, Mapping) and isinstance(band.get("kl_p99"), (int, float)) and not zero_band(band):
        return {"golden": {"kl_p99": float(band["kl_p99"])}}, "band"
    return None, "baseline"
