"""The PR comment of ``/precision bisect``: the first bad commit and the numbers at each step. Pure.

Built from the JSON ``precisionbot bisect --out FILE`` writes. Commit subjects are the PR author's text, so
every value goes through the same escaping as the result comment's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from precisionbot.report.escape import label_text

MARKER = "<!-- precisionbot:bisect -->"
ICONS = {"good": "✅", "bad": "❌", "skip": "⏭️"}


def bisect_comment(payload: Mapping[str, Any]) -> str:
    first = [str(s) for s in payload.get("first_bad") or []]
    steps = [s for s in payload.get("steps") or [] if isinstance(s, Mapping)]
    subjects = {str(s.get("sha")): str(s.get("subject") or "") for s in steps}
    if len(first) == 1:
        sha = first[0]
        subject = subjects.get(sha, "")
        head = f"first bad commit `{label_text(sha[:12])}`" + (f" {label_text(subject)}" if subject else "")
    else:
        head = "first bad commit is one of " + ", ".join(f"`{label_text(s[:12])}`" for s in first)
        head += " (the others could not be tested)"
    good, bad = str(payload.get("good", ""))[:12], str(payload.get("bad", ""))[:12]
    lines = [
        MARKER,
        f"### 🔎 precisionbot bisect: {head}",
        "",
        f"{int(payload.get('commits') or 0)} commits after `{label_text(good)}` up to `{label_text(bad)}`, "
        f"{len(steps)} steps (at most {int(payload.get('max_steps') or 0)}: ⌈log2 n⌉ plus one per skipped commit).",
        "",
        "| Step | Commit | Subject | Outcome | Numbers |",
        "|---:|---|---|---|---|",
    ]
    for i, s in enumerate(steps, 1):
        numbers = s.get("numbers") if isinstance(s.get("numbers"), Mapping) else {}
        cells = []
        for check, stats in (numbers or {}).items():
            if isinstance(stats, Mapping):
                for stat, value in stats.items():
                    if isinstance(value, (int, float)):
                        what = "KL p99" if stat == "kl_p99" else "mean k3"
                        cells.append(f"{label_text(str(check))} {what} {value:.3g}")
        outcome = str(s.get("outcome", ""))
        cached = " (cached)" if s.get("cached") else ""
        note = f" — {label_text(str(s['note']), 120)}" if s.get("note") else ""
        lines.append(
            f"| {i} | `{label_text(str(s.get('sha', ''))[:12])}` | {label_text(subjects.get(str(s.get('sha')), ''))} "
            f"| {ICONS.get(outcome, '')} {label_text(outcome)} ({label_text(str(s.get('verdict', '')))}){cached}{note} "
            f"| {', '.join(cells) or '–'} |"
        )
    return "\n".join(lines) + "\n"
