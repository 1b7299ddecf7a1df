"""The stable diagnosis codes are spelled once: every ``Diagnosis(...)`` the package builds takes its code from a
constant listed in ``DIAGNOSIS_CODES``, never a string literal, and the docs list exactly those codes."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import precisionbot
from precisionbot.report.diagnosis import DIAGNOSIS_CODES
from tests.support.browser import ROOT

PACKAGE = Path(precisionbot.__file__).parent


def _diagnosis_calls() -> list[tuple[str, int, ast.expr]]:
    """(module, line, code argument) of every ``Diagnosis(...)`` call in the package's source."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name != "Diagnosis":
                continue
            code = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "code")
            calls.append((module, node.lineno, code))
    return calls


def test_every_diagnosis_takes_its_code_from_a_listed_constant() -> None:
    calls = _diagnosis_calls()
    assert calls, "no Diagnosis(...) call found: the scan is looking in the wrong place"
    emitted = set()
    for module, line, code in calls:
        where = f"{module}:{line}"
        assert isinstance(code, ast.Name), f"{where}: the code is {ast.unparse(code)}, not a named constant"
        value = getattr(importlib.import_module(module), code.id)
        assert value in DIAGNOSIS_CODES, f"{where}: {code.id} = {value!r} is not in DIAGNOSIS_CODES"
        emitted.add(value)
    # And no listed code is dead: each one has a builder.
    assert emitted == set(DIAGNOSIS_CODES)


def test_the_codes_are_distinct_identifiers_each_with_a_meaning() -> None:
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", code) for code in DIAGNOSIS_CODES)
    assert all(meaning.strip() for meaning in DIAGNOSIS_CODES.values())


def _between(text: str, start: str, end: str) -> str:
    head = text.index(start) + len(start)
    return text[head : text.index(end, head)]


def _backticked(text: str) -> list[str]:
    """The lowercase identifiers in backticks (a path, a constant's name or ``localize:`` is not a code)."""
    return [c for c in re.findall(r"`([^`]+)`", text) if re.fullmatch(r"[a-z_]+", c)]


def test_architecture_md_lists_exactly_the_codes_in_order() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    paragraph = _between(doc, "* **Diagnosis codes**", "\n* ")
    assert _backticked(paragraph) == list(DIAGNOSIS_CODES)


def test_report_md_table_has_a_row_per_code() -> None:
    doc = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    table = _between(doc, "| code | when | what it points to |", "\n\n")
    rows = [m.group(1) for m in re.finditer(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE)]
    assert sorted(rows) == sorted(DIAGNOSIS_CODES) and len(rows) == len(set(rows))


def test_readme_lists_the_codes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = _between(" ".join(readme.split()), "Diagnosis codes are stable:", ").")
    assert sorted(_backticked(sentence)) == sorted(DIAGNOSIS_CODES)
