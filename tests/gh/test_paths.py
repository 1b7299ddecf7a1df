from __future__ import annotations

import pytest

from precisionbot.gh.paths import first_match, matches


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        ("python/sglang/srt/layers/attention/fa3.py", "**/layers/**", True),
        ("layers/x.py", "**/layers/**", True),
        ("python/players/x.py", "**/layers/**", False),
        ("sgl-kernel/csrc/a.cu", "sgl-kernel/**", True),
        ("sgl-kernel", "sgl-kernel/**", False),
        ("docs/sgl-kernel/a.md", "sgl-kernel/**", False),
        ("a.cu", "*.cu", True),
        ("csrc/a.cu", "*.cu", False),
        ("csrc/a.cu", "**/*.cu", True),
        ("csrc/deep/a.cu", "csrc/*.cu", False),
        ("a.cuh", "*.cu", False),
        ("a1.py", "a?.py", True),
        ("a/.py", "a?.py", False),
        ("a+b.py", "a+b.py", True),
        ("aab.py", "a+b.py", False),
    ],
)
def test_glob(path: str, pattern: str, expected: bool) -> None:
    assert matches(path, [pattern]) is expected


def test_no_patterns_match_everything() -> None:
    assert matches("anything", [])


def test_first_match_stops_reading() -> None:
    read: list[str] = []

    def paths() -> object:
        for p in ("README.md", "csrc/a.cu", "never/read.py"):
            read.append(p)
            yield p

    assert first_match(paths(), ["**/*.cu"]) == "csrc/a.cu"  # type: ignore[arg-type]
    assert read == ["README.md", "csrc/a.cu"]
