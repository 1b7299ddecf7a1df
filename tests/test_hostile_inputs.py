"""Each finding of issue #17 (and #13 items 12, 14, 15) as the input that showed it and what must happen now."""

from __future__ import annotations

import base64
import io
import json
import pickle
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from precisionbot.config import load_config
from precisionbot.corpus import load_jsonl
from precisionbot.engines.http import HttpClient
from precisionbot.engines.sglang_parse import parse_batch
from precisionbot.errors import ConfigError, DataError, EngineError
from precisionbot.gh.event import parse_event, pr_of
from precisionbot.gh.slash import Malformed, parse_command
from precisionbot.gh.sticky import COMMENT_LIMIT_CHARS
from precisionbot.gh.workflow import log_block, log_text
from precisionbot.report.escape import ZWJ, markdown_text
from precisionbot.report.heat_strip import worst_strips
from precisionbot.report.load import load_sections
from precisionbot.results import PositionRecord, RunResult
from precisionbot.results.directory import write_result
from tests.engines.test_sglang_parse import REQUEST, _valid
from tests.test_hostile_fuzz import (
    EVENTS,
    GOOD_SHA,
    LARGEST_COMMENTS,
    LAUGHS,
    assert_an_answer,
    forged_run,
    mutate,
)

# --- results (items 2-4, #13.14) ------------------------------------------------------------------------------


def test_heat_strips_are_linear_in_the_number_of_samples() -> None:
    n = 400_000  # each position its own sample: 34 s before (a mask per sample), milliseconds now
    lp = np.zeros(n)
    lp[123_456] = 3.0
    record = PositionRecord(
        sample=np.arange(n, dtype=np.int32),
        position=np.zeros(n, dtype=np.int32),
        token_id=np.zeros(n, dtype=np.int32),
        lp_ref=lp,
        lp_test=np.zeros(n),
    )
    strips = worst_strips("match", record, samples=2)
    assert [s.sample for s in strips] == [123_456, 0] and strips[0].bars == "█"


def _npz(directory: Path, arrays: dict[str, Any]) -> None:
    with zipfile.ZipFile(directory / "match.npz", "w") as zf:
        for name, value in arrays.items():
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            zf.writestr(f"{name}.npy", buf.getvalue())


GOOD = {k: np.zeros(3) for k in ("sample", "position", "token_id", "lp_ref", "lp_test")}
GOOD.update(sample=np.zeros(3, dtype=np.int32), position=np.arange(3), token_id=np.zeros(3, dtype=np.int32))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda d: _npz(d, {**GOOD, "lp_ref": np.float64(1.0)}), "lp_ref has shape (), expected 1 dimension"),
        (lambda d: _npz(d, {"sample": GOOD["sample"]}), "it lacks position, token_id, lp_ref, lp_test"),
        (lambda d: (d / "match.npz").write_bytes(b""), "match.npz is not a valid position-record archive"),
        (lambda d: _npz(d, {**GOOD, "lp_ref": np.array(["a", "b", "c"])}), "lp_ref holds <U1, expected numbers"),
        (lambda d: _npz(d, {**GOOD, "lp_ref": np.zeros(3, "M8[s]")}), "lp_ref holds datetime64[s], expected numbers"),
        (lambda d: _npz(d, {**GOOD, "lp_ref": np.zeros(3, "V4")}), "lp_ref holds |V4, expected numbers"),
        (lambda d: _npz(d, {**GOOD, "lp_ref": np.zeros(4)}), "lp_ref has 4 rows, sample has 3"),
        (lambda d: _append(d, b"\xff"), "not UTF-8 text"),
        (lambda d: _write(d, b'{"schema": 1, "checks": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "nested too deep"),
        (lambda d: _edit(d, lambda r: r["checks"][0]["stats"].update(mean_k3=10**400)), "mean_k3 is a JSON number"),
        (lambda d: _edit(d, lambda r: r["checks"][0].update(samples=[_sample("Infinity")])), "out of range"),
        (lambda d: _write(d, b" " * (33 * 2**20)), "larger than 32 MiB"),
    ],
)
def test_a_damaged_cell_is_reported_and_the_others_render(
    tmp_path: Path, damage: Callable[[Path], None], expected: str
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    for d in (good, bad):
        write_result(d, RunResult.from_json(json.dumps(forged_run())))
    damage(bad)
    sections = load_sections([good, bad])
    assert "stats: mean_k3 0.144" in sections[0].run.checks[0].reasons[0]
    reason = sections[1].run.checks[0].reasons[0]
    assert reason.startswith("damaged result directory: ") and expected in reason, reason


def _sample(prompt_tokens: Any) -> dict[str, Any]:
    return {"sample": 0, "prompt_tokens": prompt_tokens, "positions": 1, "mean_k3": 0.0, "max_k3": 0.0} | {
        "contiguous_from_first": False
    }


def _write(d: Path, data: bytes) -> None:
    (d / "result.json").write_bytes(data)


def _append(d: Path, data: bytes) -> None:
    _write(d, (d / "result.json").read_bytes() + data)


def _edit(d: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads((d / "result.json").read_text())
    change(doc)
    _write(d, json.dumps(doc).encode())


# --- GitHub events (items 5-8, #13.12) ------------------------------------------------------------------------


def test_superscript_digits_are_the_usage_reply_not_a_crash() -> None:
    for text in ("²", "³", "٧", "-7", "+7", "7.0"):
        command = parse_command(f"/precision rerun samples={text}")
        assert isinstance(command, Malformed) and "whole number" in command.problem


COMMENT_HANG_S = 30
"""For all the shapes together, child start included: a hang detector, not a speed limit (the parses take
milliseconds; before the linear parser, a single long word took 20 s to a minute)."""
PARSE_EACH = """
import base64, json, pickle, sys
from precisionbot.gh.slash import parse_command
for body in json.load(sys.stdin):
    print(base64.b64encode(pickle.dumps(parse_command(body))).decode(), flush=True)
"""


def test_the_largest_comments_are_answered_without_a_hang() -> None:
    """Every shape at 65,536 characters, parsed in a child process that is killed at the deadline: a parse stuck
    in C (a backtracking regex never returns to the interpreter, so no signal or thread timeout can stop it)
    fails this test instead of hanging the suite."""
    names, bodies = list(LARGEST_COMMENTS), list(LARGEST_COMMENTS.values())
    assert {len(body) for body in bodies} == {COMMENT_LIMIT_CHARS}
    try:
        child = subprocess.run(
            [sys.executable, "-c", PARSE_EACH],
            input=json.dumps(bodies),
            capture_output=True,
            text=True,
            timeout=COMMENT_HANG_S,
            check=True,
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        hung = names[partial.count("\n")]
        pytest.fail(f"parsing {hung!r} took over {COMMENT_HANG_S} s: a hang")
    results = [pickle.loads(base64.b64decode(line)) for line in child.stdout.splitlines()]
    for name, result in zip(names, results, strict=True):
        try:
            assert_an_answer(result)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


@pytest.mark.parametrize(
    ("name", "path", "value", "field"),
    [
        ("pull_request", ("pull_request", "head"), "abc", "pull_request.head"),
        ("issue_comment", ("comment", "user"), "writer", "comment.user"),
        ("push", ("repository",), [1], "repository"),
        ("workflow_dispatch", ("inputs",), ["x"], "inputs"),
        ("issue_comment", ("comment", "user", "login"), 7, "comment.user.login"),
        ("issue_comment", ("comment", "created_at"), "2026-11-30T06:00:00", "comment.created_at"),
        ("push", ("after",), 123, "after"),
        ("pull_request", ("pull_request", "number"), float("inf"), "pull_request.number"),
        ("workflow_dispatch", ("inputs", "pr"), "²", "inputs.pr"),
        ("workflow_dispatch", ("inputs", "pr"), "0", "inputs.pr"),
        *(("pull_request", ("pull_request", "head", "sha"), v, "pull_request.head.sha") for v in
          ("", "HEAD~1", "-Xfoo", GOOD_SHA[:7], GOOD_SHA + "\n::error::x", None, GOOD_SHA.upper())),
        *(("push", ("after",), v, "after") for v in ("", "HEAD~1", GOOD_SHA[:7], None)),
        *(("pull_request", ("pull_request", "number"), v, "pull_request.number") for v in
          (-7, 0, 1e20, "7", 7.5, "٧", "7\n", True, 2**70)),
    ],
)  # fmt: skip
def test_a_payload_field_of_the_wrong_form_is_named(name: str, path: tuple[Any, ...], value: Any, field: str) -> None:
    payload = mutate(EVENTS[name], path, value, False)
    if name == "push" and value is None:
        payload["after"] = "null"
    with pytest.raises(DataError, match=f"the event payload's {field} is not what GitHub sends"):
        parse_event(name, payload, GOOD_SHA)


def test_the_comment_job_reads_the_pr_number_strictly() -> None:
    assert pr_of(EVENTS["pull_request"]) == 7 and pr_of({"inputs": {"pr": "²"}}) is None
    for bad in ("abc", float("inf"), 0, True):
        with pytest.raises(DataError, match=r"pull_request\.number"):
            pr_of({"pull_request": {"number": bad}})


def test_untrusted_text_cannot_start_a_workflow_command() -> None:
    ref = "refs/heads/x\n::error::pwned\r::add-mask::secret"
    line = f"precisionbot: skip: push to {log_text(ref)}"
    assert len(line.splitlines()) == 1 and "%0A::error::pwned%0D::add-mask::secret" in line
    for text in ("::stop-commands::tok", "  ::error::x", "##[set-output name=run;]true"):
        assert log_text(text).startswith("\u200b")
    block = log_block("## ok\n::error file=a::x\r::warning::y\n  ::debug::z")
    assert not any(ln.lstrip().startswith("::") for ln in block.splitlines())


# --- configs (item 9) -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"engine: {kind: \xff}\n", "not UTF-8 text"),
        (b"engine: " + b"[" * 20_000, "nested too deeply"),
        (b"engine:\n" + b"".join(b"  " * i + b"a:\n" for i in range(1, 400)), "unknown key 'engine.a'"),
        (b"engine: {batch_size: " + b"9" * 5_000 + b"}", "a value cannot be read"),
        (b'suites: {pr: {corpus: "a\\0b"}}', "key 'suites.pr.corpus' contains a NUL character"),
        (b"suites: {pr: {seed: -5}}", "key 'suites.pr.seed' must be >= 0"),
        (b"engine: {request_timeout_s: 1.0e+300}", "key 'engine.request_timeout_s' is out of range"),
        (b"engine: {request_timeout_s: 1.0e+9}", "key 'engine.request_timeout_s' must be at most 604800"),
        (b"runner: {root_volume_gb: 123456789012345678901}", "key 'runner.root_volume_gb' is out of range"),
        (LAUGHS.encode(), "key 'engine.kind' must be a string (got a list of 9 item(s))"),
        (b"x" * (1024 * 1024 + 1), "larger than 1024 KiB"),
    ],
)
def test_a_hostile_config_is_one_clear_error(tmp_path: Path, text: bytes, expected: str) -> None:
    path = tmp_path / "precision.yml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and expected in str(info.value), str(info.value)


def test_a_corpus_that_is_not_a_regular_file_is_refused() -> None:
    for path in ("/dev/zero", "a\0b"):
        with pytest.raises(DataError, match="not a regular file"):
            load_jsonl(path)


# --- engine answers (item 10) ---------------------------------------------------------------------------------


def test_a_huge_token_id_is_an_engine_error_naming_the_field() -> None:
    answer = _valid()
    answer["meta_info"]["output_token_logprobs"][1][1] = 2**70
    with pytest.raises(EngineError, match=r"output_token_logprobs\[1\] token id must be an integer >= 0"):
        parse_batch([answer], [REQUEST], 0)
    answer = _valid()
    answer["meta_info"]["output_token_logprobs"][1][0] = -(10**400)
    with pytest.raises(EngineError, match="out of range"):
        parse_batch([answer], [REQUEST], 0)


@contextmanager
def answering(body: bytes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_deeply_nested_engine_answer_is_an_engine_error() -> None:
    with answering(b"[" * 100_000 + b"]" * 100_000) as url:
        client = HttpClient(url, timeout_s=10)
        try:
            with pytest.raises(EngineError, match="nested too deeply"):
                client.json_call("POST", "/generate", json={}, what="generate")
        finally:
            client.close()


# --- Markdown (#13.15) ----------------------------------------------------------------------------------------


def test_gh_references_are_broken_like_issue_references() -> None:
    for text in ("GH-12", "gh-7", "see GH-123."):
        out = markdown_text(text)
        assert "H-" + ZWJ in out or "h-" + ZWJ in out
    assert markdown_text("SIGH-12") == "SIGH-12" and markdown_text("GH-x") == "GH-x"


def test_an_openai_token_id_must_be_ascii_digits_within_int32() -> None:
    from precisionbot.engines.openai import _token_id

    assert _token_id("token_id:42", 0, "tokens[0]") == 42
    for bad in ("token_id:²", "token_id:٧", "token_id:" + "9" * 30, "token_id:", "token_id:-1", 42):
        with pytest.raises(EngineError, match="is not 'token_id:N'"):
            _token_id(bad, 0, "tokens[0]")


def test_a_deeply_nested_event_payload_is_one_clear_error(tmp_path: Path) -> None:
    from precisionbot.commands.github import read_payload

    path = tmp_path / "event.json"
    path.write_text('{"pull_request": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match=r"GITHUB_EVENT_PATH=.*nested too deeply"):
        read_payload(str(path))
