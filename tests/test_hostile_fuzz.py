"""Property-based fuzzing of every untrusted input kind (issue #17), seeded and derandomized.

Events, result directories, configs and engine answers are mutated one field at a time into hostile values
(wrong types, huge and non-ASCII numbers, deep nesting, declared sizes far beyond the data, forged
verdicts); PR comments are hostile pieces repeated up to GitHub's largest body. Each property asserts: only
our own error type comes out (no internal error), memory stays bounded (tracemalloc's peak, which NumPy
allocations are counted in, under a cap: the caps must reject before allocating), nothing hangs (a SIGALRM
guard fails the example instead of hanging CI), and an input that is invalid never yields PASS or
``run=true``.
"""

from __future__ import annotations

import copy
import io
import json
import math
import signal
import tracemalloc
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precisionbot.config import Config, load_config
from precisionbot.engines.sglang_parse import parse_batch
from precisionbot.errors import ConfigError, DataError, EngineError
from precisionbot.gh.api import PullInfo
from precisionbot.gh.event import parse_event
from precisionbot.gh.gate import Facts, decide
from precisionbot.gh.slash import VERBS, Malformed, SlashCommand, parse_command
from precisionbot.gh.sticky import COMMENT_LIMIT_CHARS
from precisionbot.report import render_comment, render_json, render_summary
from precisionbot.report.load import load_sections
from precisionbot.results import CheckResult, EngineInfo, PositionRecord, RunResult, Verdict
from precisionbot.results import arrays as result_arrays
from precisionbot.results.directory import write_result
from precisionbot.untrusted import FULL_SHA
from tests.engines.test_sglang_parse import REQUEST, _valid
from tests.gh.test_slash import padded
from tests.report.test_verify import stats

FUZZ = settings(
    derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck), max_examples=60
)
GOOD_SHA = "0123456789abcdef0123456789abcdef01234567"
MEMORY_CAP_BYTES = 256 * 1024 * 1024
GUARD_S = 60


@contextmanager
def bounded(cap_bytes: int = MEMORY_CAP_BYTES, guard_s: int = GUARD_S) -> Iterator[None]:
    """Fail (never hang) past ``guard_s`` seconds; fail when the traced peak memory passes the cap."""

    def expire(signum: int, frame: Any) -> None:
        raise AssertionError(f"an input took more than {guard_s} s: a hang")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(guard_s)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < cap_bytes, f"peak traced memory {peak:,} bytes"
    finally:
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([10**400, -7, 0, 7.5, 1e20, math.inf, -math.inf, math.nan]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "²", "٧", "7\n", "HEAD~1", "-Xfoo", GOOD_SHA[:7], GOOD_SHA + "\n", "Infinity", "NaN"]),
    st.sampled_from(["::error::pwned", "%0A::add-mask::x", "a\0b", "\ud7ff\u202e", "x" * 10_000, "GH-12"]),
    st.sampled_from(["\ud800", "a\udfffb", "\udbff"]),  # lone surrogates: json.loads makes them from "\\ud800"
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.sampled_from([deep(50), deep(400)]),
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += paths(v, (*prefix, i))
    return out


def mutate(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


# --- GitHub events -------------------------------------------------------------------------------------------

EVENTS: dict[str, dict[str, Any]] = {
    "pull_request": {
        "action": "opened",
        "pull_request": {
            "number": 7,
            "head": {"sha": GOOD_SHA, "repo": {"full_name": "o/r"}},
            "base": {"repo": {"full_name": "o/r"}},
            "labels": [{"name": "kernels"}],
        },
        "sender": {"login": "alice"},
        "repository": {"default_branch": "main"},
    },
    "issue_comment": {
        "action": "created",
        "issue": {"number": 7, "pull_request": {"url": "u"}},
        "comment": {
            "id": 5,
            "body": "/precision rerun samples=3",
            "user": {"login": "alice", "type": "User"},
            "created_at": "2026-11-30T06:00:00Z",
        },
        "sender": {"login": "alice"},
        "repository": {"default_branch": "main"},
    },
    "push": {"ref": "refs/heads/main", "after": GOOD_SHA, "repository": {"default_branch": "main"}},
    "workflow_dispatch": {"inputs": {"suite": "pr", "pr": "7", "models": ""}, "repository": {"default_branch": "main"}},
}
MUST_BE_VALID = {
    ("pull_request", "number"),
    ("pull_request", "head", "sha"),
    ("issue", "number"),
    ("comment", "id"),
    ("comment", "created_at"),
    ("after",),
    ("inputs", "pr"),
}
"""Fields whose hostile value must stop the run (a run needs a full SHA and a positive PR number)."""
FACTS = Facts(
    bot_login="bot",
    matched_path="kernels/a.cu",
    pull=PullInfo(7, GOOD_SHA, "o/r", "o/r", "alice"),
    permission="admin",
    head_committed_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    default_head=GOOD_SHA,
)


def _valid_for(path: tuple[Any, ...], value: Any) -> bool:
    """Whether ``value`` is a legitimate value of a MUST_BE_VALID field (then it may run)."""
    if path[-1] in ("sha", "after"):
        return isinstance(value, str) and FULL_SHA.fullmatch(value) is not None
    if path == ("inputs", "pr"):
        text = str(value)
        return value is None or (isinstance(value, (str, int)) and text.isascii() and text.isdigit() and int(text) > 0)
    if path == ("comment", "created_at"):
        return isinstance(value, str) and value.endswith("Z")
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**53


def test_the_unmutated_events_run() -> None:
    for name, payload in EVENTS.items():
        assert decide(parse_event(name, payload, GOOD_SHA), FACTS, Config.default()).run, name


@FUZZ
@given(st.data())
def test_events(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(EVENTS)))
    path = data.draw(st.sampled_from(paths(EVENTS[name])))
    value, delete = data.draw(HOSTILE), data.draw(st.booleans())
    payload = mutate(EVENTS[name], path, value, delete)
    with bounded():
        try:
            decision = decide(parse_event(name, payload, GOOD_SHA), FACTS, Config.default())
        except (DataError, ConfigError):  # exit 3 with one line naming the field (or the unknown suite)
            return
    invalid = (delete and path != ("inputs", "pr")) or not (delete or _valid_for(path, value))
    if path in MUST_BE_VALID and invalid:
        assert not decision.run, (path, value, decision)
    if decision.run:
        assert FULL_SHA.fullmatch(decision.sha) and (decision.pr is None or decision.pr >= 1), decision


# --- PR comments (slash commands) -----------------------------------------------------------------------------

COMMENT_GUARD_S = 5
"""A hang, not a speed limit: a parse takes milliseconds; the quadratic parser took 20 s to a minute."""


LARGEST_COMMENTS = {
    "one long word": padded("/precision rerun ", "a"),
    "one long key=value": padded("/precision rerun models=", "a"),
    "a word of = signs": padded("/precision rerun ", "="),
    "a word of quotes": padded("/precision accept ", '"'),
    "an unclosed quoted reason": padded('/precision accept reason="', "x"),
    "a long quoted reason": padded('/precision accept reason="', "why ", '"'),
    'reason="..." again and again': padded("/precision accept ", 'reason="x" '),
    'pairs run together: reason="x"reason="x"': padded("/precision accept ", 'reason="x"'),
    'key=" again and again': padded("/precision rerun ", 'a="'),
    "many key=value words": padded("/precision rerun ", "models=a "),
    "32,756 model names, all the same": padded("/precision rerun models=", "a,"),
    "12,770 model names, all different": ("/precision rerun models=" + ",".join(map(str, range(20_000))))[
        :COMMENT_LIMIT_CHARS
    ],
    "many lines": padded("/precision rerun\n", "x\n"),
    "/precision over and over": padded("", "/precision "),
    "whitespace runs": padded("/precision", " \t\u00a0\u3000", " help"),
    "unicode word": padded("/precision rerun models=", "\u00e9\u0130\U0001f600"),
    "unicode line breaks": padded("/precision help", "\u2028\u2029\x85"),
}
"""The shapes of comment that cost the parser most (a long word cost it a minute), each at the largest size."""


def assert_an_answer(result: SlashCommand | Malformed | None) -> None:
    """A proper parse: not for us (None), a command of a known verb, or one short sentence for the 😕 reply."""
    if isinstance(result, Malformed):
        assert result.problem and "\n" not in result.problem and len(result.problem) < 200, result
    else:
        assert result is None or (isinstance(result, SlashCommand) and result.verb in VERBS), result


COMMENT_PIECES = st.sampled_from(
    ["/precision ", "rerun", "accept", "reason", "models", "samples", "=", '"', '="', ",", "a", "9", " ", "\t",
     "\u00a0", "\n", "\u2028", "\u00e9", "\u0130", "\U0001f600", "\ufeff", "`", "@"]
)  # fmt: skip


@FUZZ
@given(st.data())
def test_comments(data: st.DataObject) -> None:
    """A few pieces repeated up to the largest comment, after a drawn start: every parse answers, in time."""
    head = data.draw(st.sampled_from(["/precision rerun ", "/precision accept ", '/precision accept reason="', ""]))
    unit = "".join(data.draw(st.lists(COMMENT_PIECES, min_size=1, max_size=6)))
    tail = data.draw(st.sampled_from(["", '"', " help", 'reason="x"']))
    body = padded(head, unit, tail)
    with bounded(guard_s=COMMENT_GUARD_S):
        result = parse_command(body)
    assert_an_answer(result)


# --- result directories ---------------------------------------------------------------------------------------


def forged_run() -> dict[str, Any]:
    """A run that claims PASS over a failing check: nothing below may turn it into a PASS."""
    check = CheckResult(name="match", verdict=Verdict.PASS, stats=stats(mean_k3=0.144))
    run = RunResult(verdict=Verdict.PASS, signature="s", engine=EngineInfo("http://e", "sglang"), checks=(check,))
    data: dict[str, Any] = json.loads(run.to_json())
    data["checks"][0]["worst"] = [
        {
            "sample": 0,
            "position": 3,
            "token_id": 9,
            "token_text": "@x #1",
            "lp_ref": -1.0,
            "lp_test": -2.0,
            "delta": 1.0,
            "k3": 0.7,
        }
    ]
    data["environment"] = {"model": "m", "tp": 1}
    return data


PROTECTED = {("checks",), ("checks", 0), ("checks", 0, "stats"), ("checks", 0, "stats", "mean_k3")}


def _npy(shape: tuple[int, ...], dtype: str, data_bytes: int) -> bytes:
    """An npy file whose header declares ``shape`` while only ``data_bytes`` follow (a size lie)."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": dtype, "fortran_order": False, "shape": shape})
    return out.getvalue() + b"\0" * data_bytes


ARRAYS = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["sample", "position", "token_id", "lp_ref", "lp_test", "top_ids_ref", "junk"]),
        "shape": st.lists(st.integers(0, 10**12), max_size=3).map(tuple),
        "dtype": st.sampled_from(["<i4", "<i8", "<f8", "<U5", "<M8[s]", "|V4", "|b1", "<c16", "|O"]),
        "data_bytes": st.integers(0, 4096),
    }
)


def _write_npz(directory: Path, members: list[dict[str, Any]], honest: bool) -> None:
    with zipfile.ZipFile(directory / "match.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        if honest:
            rec = PositionRecord.from_lists([0, 1], [3, 4], [9, 9], [-1.0, -1.0], [-2.0, -1.0])
            for key, arr in rec.arrays().items():
                buf = io.BytesIO()
                np.save(buf, arr)
                zf.writestr(f"{key}.npy", buf.getvalue())
        with warnings.catch_warnings():  # a duplicate member name is one of the hostile cases
            warnings.simplefilter("ignore", UserWarning)
            for m in members:
                zf.writestr(f"{m['name']}.npy", _npy(m["shape"], m["dtype"], m["data_bytes"]))


def _render_all(directory: Path) -> Verdict:
    sections = load_sections([directory])
    render_comment(sections)
    render_summary(sections)
    render_json(sections)
    return Verdict.combine(s.run.verdict for s in sections)


@FUZZ
@given(st.data())
def test_result_directories(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    directory = tmp_path_factory.mktemp("cell")
    doc = forged_run()
    for _ in range(data.draw(st.integers(1, 3))):
        candidates = [p for p in paths(doc) if p not in PROTECTED]
        doc = mutate(doc, data.draw(st.sampled_from(candidates)), data.draw(HOSTILE), data.draw(st.booleans()))
    text = json.dumps(doc, allow_nan=True).encode()
    how = data.draw(st.sampled_from(["json", "truncate", "append", "deep"]))
    if how == "truncate":
        text = text[: data.draw(st.integers(0, len(text)))]
    elif how == "append":
        text += data.draw(st.sampled_from([b"\xff", b"]", b"\0", b"{}"]))
    elif how == "deep":
        n = data.draw(st.sampled_from([500, 5_000, 100_000]))
        text = b'{"schema": 1, "checks": ' + b"[" * n + b"]" * n + b"}"
    (directory / "result.json").write_bytes(text)
    _write_npz(directory, data.draw(st.lists(ARRAYS, max_size=2)), data.draw(st.booleans()))
    with bounded():
        verdict = _render_all(directory)
    assert verdict is not Verdict.PASS


def test_a_header_bomb_and_a_zip_bomb_are_refused_before_allocating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_result(tmp_path, RunResult.from_json(json.dumps(forged_run())))
    with zipfile.ZipFile(tmp_path / "match.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("lp_ref.npy", _npy((10**11,), "<f8", 64))
    with bounded(cap_bytes=4 * 1024 * 1024):
        sections = load_sections([tmp_path])
    assert "declares 800,000,000,000 bytes" in sections[0].run.checks[0].reasons[0]
    # A zip bomb in miniature: 8 MiB of zeros (8 kB compressed) against a 1 MiB cap; the traced peak (reads go
    # in 1 MiB chunks) stays below what inflating it would take.
    monkeypatch.setattr(result_arrays, "MAX_ARRAY_BYTES", 1024 * 1024)
    with zipfile.ZipFile(tmp_path / "match.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("lp_ref.npy", _npy((2**20,), "<f8", 2**23))
    with bounded(cap_bytes=4 * 1024 * 1024):
        sections = load_sections([tmp_path])
    assert "above the cap of 1,048,576" in sections[0].run.checks[0].reasons[0]


# --- configs --------------------------------------------------------------------------------------------------

BASE_CONFIG = {
    "engine": {"kind": "sglang", "request_timeout_s": 60, "batch_size": 8},
    "models": [{"name": "m", "path": "org/m", "tp": 2}],
    "suites": {"pr": {"checks": ["match", "golden"], "samples": 8, "seed": 1, "corpus": "c.jsonl"}},
    "thresholds": {"profile": "default", "models": {"m@tp2": {"kl_div": 0.003}}},
    "github": {"paths": ["**/layers/**"]},
    "runner": {"ttl_minutes": 60},
}
RAW_YAML = st.sampled_from(
    [
        "[" * 20_000,
        "9" * 5_000,
        '"a\\0b"',
        "/dev/zero",
        "-5",
        "1.0e+300",
        ".inf",
        "!!python/object:os.system x",
        "&a [*a]",
    ]
)
LAUGHS = (
    "engine: {kind: [&a [x, x, x, x, x, x, x, x, x], "
    + ", ".join(f"&{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8))
    + "]}\n"
)
"""Nine levels of nine aliases: 9**9 leaves when expanded (the 491-byte "billion laughs" of the issue)."""


@FUZZ
@given(st.data())
def test_configs(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    import yaml

    path = tmp_path_factory.mktemp("config") / "precision.yml"
    how = data.draw(st.sampled_from(["value", "raw", "bytes", "laughs"]))
    key = data.draw(st.sampled_from(paths(BASE_CONFIG)))
    if how == "value":
        value = data.draw(HOSTILE.filter(lambda v: not (isinstance(v, float) and math.isnan(v))))
        text = yaml.safe_dump(mutate(BASE_CONFIG, key, value, data.draw(st.booleans())), allow_unicode=True)
        raw = text.encode("utf-8", errors="surrogatepass")
    elif how == "raw":
        marker = "__HOSTILE__"
        text = yaml.safe_dump(mutate(BASE_CONFIG, key, marker, False))
        raw = text.replace(repr(marker).strip("'"), data.draw(RAW_YAML)).encode()
    elif how == "bytes":
        raw = yaml.safe_dump(BASE_CONFIG).encode()
        at = data.draw(st.integers(0, len(raw)))
        raw = raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    else:
        raw = LAUGHS.encode()
    path.write_bytes(raw)
    with bounded():
        try:
            load_config(path)
        except ConfigError as exc:
            assert str(path) in str(exc)


# --- engine answers -------------------------------------------------------------------------------------------


@FUZZ
@given(st.data())
def test_engine_answers(data: st.DataObject) -> None:
    answer = _valid()
    for _ in range(data.draw(st.integers(1, 2))):
        where = paths(answer)
        if where:
            answer = mutate(answer, data.draw(st.sampled_from(where)), data.draw(HOSTILE), data.draw(st.booleans()))
    with bounded(), suppress(EngineError):
        parse_batch([answer], [REQUEST], 0)
