"""``precisionbot serve`` in a subprocess: prints its URL once healthy, stops cleanly on SIGTERM."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

import httpx
import pytest

from precisionbot.commands import serve
from precisionbot.errors import ConfigError

# Only the serve command's parser: the test does not depend on the other subcommands being importable.
_RUNNER = """
import argparse, sys
from precisionbot.commands import serve
parser = argparse.ArgumentParser(prog="precisionbot")
serve.register(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
sys.exit(args.handler(args))
"""


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def test_flags_become_options() -> None:
    args = _parse("--fault", "attn-p-fp8", "--fault", "mantissa=6", "--seed", "3", "--page-size", "8",
                  "--chunked-prefill-size", "256", "--disable-radix-cache", "--dtype", "float32")  # fmt: skip
    o = serve.options_from_args(args)
    assert o.fault_specs() == ["attn-p-fp8", "mantissa=6"] and o.seed == 3 and o.page_size == 8
    assert o.chunked_prefill_size == 256 and o.disable_radix_cache and o.dtype == "float32"
    assert o.spec_algorithm is None
    spec = serve.options_from_args(_parse("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "3"))
    assert spec.spec_algorithm == "NGRAM" and spec.speculative_num_draft_tokens == 3


def test_unknown_fault_is_a_config_error_before_torch_loads() -> None:
    with pytest.raises(ConfigError, match="valid faults"):
        serve.run(_parse("--fault", "nope"))


def test_serve_prints_url_and_stops_on_sigterm() -> None:
    cmd = [sys.executable, "-c", _RUNNER, "serve", "--port", "0", "--fault", "attn-p-bf16"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        _check_serving(proc)


def _check_serving(proc: subprocess.Popen[str]) -> None:
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # printed only once the server is up
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        assert httpx.get(f"{url}/server_info", timeout=10).json()["faults"] == ["attn-p-bf16"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
