"""Compatibility kept by SGLang itself: the released ``sglang==0.5.23`` comparator
(``python -m sglang.srt.debug_utils.comparator``) reads the builtin engine's dumps and agrees with
precisionbot, tensor by tensor, on which pass; and its own record parser accepts localize's JSONL.

scripts/test installs the wheel with ``--no-deps`` plus the three packages the comparator imports (polars,
rich, einops). SGLang's package ``__init__`` files are not run (they import the serving stack: transformers,
triton, zmq); nor is its ``dumper`` module, which the comparator imports for one display helper
(``get_truncated_value``: a tensor's first values, printed for failing tensors) and which itself imports the
serving stack: a stand-in returning the tensor unchanged replaces it. Every comparison, loader and record
class is SGLang's code from the installed files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from precisionbot.cli import main
from precisionbot.localize import jsonl
from precisionbot.localize.dumps import read_capture

pytestmark = pytest.mark.slow

SGLANG_VERSION = "0.5.23"
COMPARATOR_DEPS = ("polars", "rich", "einops")

LAUNCHER = """
import sys, types, importlib.util
from pathlib import Path
root = Path(next(iter(importlib.util.find_spec("sglang").submodule_search_locations)))
for name, sub in (("sglang", ""), ("sglang.srt", "srt"), ("sglang.srt.debug_utils", "srt/debug_utils")):
    module = types.ModuleType(name)
    module.__path__ = [str(root / sub)]
    sys.modules[name] = module
dumper = types.ModuleType("sglang.srt.debug_utils.dumper")
dumper.get_truncated_value = lambda value: value
sys.modules["sglang.srt.debug_utils.dumper"] = dumper
if sys.argv[1] == "parse":
    from sglang.srt.debug_utils.comparator.output_types import parse_record_json
    lines = Path(sys.argv[2]).read_text().splitlines()
    print(" ".join(type(parse_record_json(line)).__name__ for line in lines))
else:
    from sglang.srt.debug_utils.comparator.entrypoint import main
    sys.argv = ["comparator", *sys.argv[2:]]
    main()
"""


def _require() -> None:
    missing = [m for m in ("sglang", *COMPARATOR_DEPS) if importlib.util.find_spec(m) is None]
    if missing:
        message = f"needs {', '.join(missing)} (scripts/test installs sglang=={SGLANG_VERSION} --no-deps and them)"
        if os.environ.get("PRECISIONBOT_REQUIRE_SGLANG"):
            pytest.fail(message)
        pytest.skip(message)


def _sglang(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    launcher = tmp_path / "sglang_comparator.py"
    launcher.write_text(LAUNCHER)
    return subprocess.run(
        [sys.executable, str(launcher), *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean build's and a faulted build's dumps of the same tokens (``mantissa=3``: large differences in
    later modules, none before the first layer's residual)."""
    _require()
    out = tmp_path_factory.mktemp("golden")
    argv = ["localize", "--engine", "builtin", "--path", "golden", "--fault", "mantissa=3", "--out", str(out)]
    assert main(argv) == 1
    return out


def test_sglang_comparator_agrees_on_which_tensors_pass(golden: Path, tmp_path: Path) -> None:
    base, target = golden / "dumps" / "baseline", golden / "dumps" / "target"
    proc = _sglang(
        tmp_path, "compare", "--baseline-path", str(base), "--target-path", str(target),
        "--output-format", "json", "--report-path", "",
    )  # fmt: skip
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    theirs: dict[tuple[int, str], dict[str, Any]] = {
        (r["location"]["step"], r["name"][len("non_intrusive__") :]): r
        for r in records
        if r["type"] == "comparison_tensor" and r["name"].startswith("non_intrusive__")
    }
    assert theirs, proc.stderr[-2000:]
    b, t = read_capture(base, "baseline"), read_capture(target, "target")
    ours = {}
    for sb, st in zip(b.steps, t.steps, strict=True):
        for name in st.tensors:
            ours[(st.step, name)] = jsonl.tensor_record(name, sb.tensors[name], st.tensors[name], st.step)
    assert set(ours) == set(theirs)
    verdicts = {key: jsonl.passed(ours[key]) for key in ours}
    assert verdicts == {key: bool(theirs[key]["diff"]["passed"]) for key in theirs}
    assert set(verdicts.values()) == {True, False}  # both kinds occur, so the agreement means something
    for key, record in ours.items():
        assert record["diff"]["rel_diff"] == pytest.approx(theirs[key]["diff"]["rel_diff"], rel=1e-9, abs=1e-15)
        assert record["diff"]["max_abs_diff"] == theirs[key]["diff"]["max_abs_diff"]
    summary = next(r for r in records if r["type"] == "summary")
    assert summary["errored"] == 0 and summary["failed"] >= sum(1 for v in verdicts.values() if not v)


def test_sglang_parses_the_localize_report(golden: Path, tmp_path: Path) -> None:
    proc = _sglang(tmp_path, "parse", str(golden / "comparison.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    kinds = proc.stdout.split()
    assert kinds[-2:] == ["LogRecord", "SummaryRecord"]
    assert kinds.count("ComparisonTensorRecord") == len(kinds) - 2
