"""The ``/precision bisect`` comment: an ambiguous answer, and commit subjects that are hostile Markdown."""

from __future__ import annotations

from precisionbot.report.bisect_comment import MARKER, bisect_comment


def test_ambiguous_answer_and_hostile_subjects_are_inert() -> None:
    payload = {
        "good": "a" * 40,
        "bad": "b" * 40,
        "commits": 3,
        "first_bad": ["c" * 40, "b" * 40],
        "max_steps": 3,
        "steps": [
            {
                "sha": "c" * 40,
                "outcome": "skip",
                "verdict": "does not build",
                "numbers": {},
                "note": "engine.install exited with code 1",
                "subject": "fix | <img src=x onerror=alert(1)> @admin",
            }
        ],
    }
    md = bisect_comment(payload)
    assert md.startswith(MARKER)
    assert f"first bad commit is one of `{'c' * 12}`, `{'b' * 12}` (the others could not be tested)" in md
    assert "<img" not in md and "&lt;img" in md and "fix &#124;" in md  # no tag, no extra table cell
    assert "@admin" not in md  # no mention
    assert md.count("\n| ") == 2  # header + one step
