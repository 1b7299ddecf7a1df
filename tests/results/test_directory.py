"""A malformed result.json is a DataError naming the file and what is wrong where (exit 3), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from precisionbot.cli import main
from precisionbot.errors import DataError
from precisionbot.results.directory import read_result, write_result
from tests.results.test_run import _run


def _valid(tmp_path: Path) -> dict[str, Any]:
    write_result(tmp_path, _run())
    data: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return data


def _write(tmp_path: Path, data: object) -> None:
    (tmp_path / "result.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: [1, 2], "the top level is a JSON array, expected an object"),
        (lambda d: d["checks"][0].pop("verdict"), "missing key 'verdict' in checks[0]"),
        (lambda d: d.pop("signature"), "missing key 'signature' in the top level"),
        (lambda d: d.update(engine="x"), "engine is a JSON string, expected an object"),
        (lambda d: d.update(checks={"a": 1}), "checks is a JSON object, expected an array"),
        (lambda d: d["checks"].__setitem__(1, 7), "checks[1] is a JSON number, expected an object"),
        (lambda d: d["checks"][0]["worst"][0].pop("k3"), "missing key 'k3' in checks[0].worst[0]"),
        (lambda d: d["checks"][0]["cache"].pop("kept"), "missing key 'kept' in checks[0].cache"),
        (lambda d: d.update(diagnosis=[{"code": "noise"}]), "missing key 'text' in diagnosis[0]"),
    ],
)
def test_malformed_results_name_the_file_and_the_place(tmp_path: Path, mutate: Any, expected: str) -> None:
    data = _valid(tmp_path)
    replaced = mutate(data)
    _write(tmp_path, replaced if isinstance(replaced, list) else data)
    with pytest.raises(DataError) as info:
        read_result(tmp_path)
    assert str(info.value) == f"{tmp_path / 'result.json'} is not a valid precisionbot result (schema 1): {expected}"


def test_a_json_list_result_is_a_damaged_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, [1, 2])
    assert main(["report", str(tmp_path), "--verdict-exit"]) == 2
    captured = capsys.readouterr()
    assert "result.json is not a valid precisionbot result (schema 1): the top level is a JSON array" in captured.out
    assert "internal error" not in captured.err
