"""What a ``precisionbot check`` run wrote, read back by the real-engine tests (vLLM, llama-server): its
``result.json`` as a mapping and its checks by name."""

from __future__ import annotations

import json
from pathlib import Path


def read_result_json(out: Path) -> dict[str, object]:
    data = json.loads((out / "result.json").read_text())
    assert isinstance(data, dict)
    return data


def checks_by_name(result: dict[str, object]) -> dict[str, dict[str, object]]:
    checks = result["checks"]
    assert isinstance(checks, list)
    return {str(c["name"]): c for c in checks}
