"""Client benchmark: precisionbot's own time against an engine that answers instantly.

    .venv/bin/python benchmarks/bench_client.py [--repeat 3] [--record]

Against a GPU engine our HTTP, parsing, validation and statistics must vanish next to the engine's time. This
measures them alone: the answers of one real run of the builtin engine (the default suite: three helpers,
32 samples x 512 new tokens, prompts 1536..4608 tokens; and golden at its default options, ~16k positions)
are recorded once into ``.cache/bench_client/`` (minutes of CPU, run niced; ``--record`` redoes it) and served
from memory by ``replay_engine.py`` in its own process on 127.0.0.1, which costs nothing but socket writes.

For each part it reports, in a child process per part (so peak RSS is that part's):

* the client's wall time (``run_suite`` of the three helpers; golden's ``compare_golden`` against a baseline
  recorded from the same answers before timing), best of ``--repeat``;
* the floor: the same answer bytes (checked equal to what the server sent during the client's run) parsed with
  orjson and turned into the numpy arrays a check needs, with nothing else; best of ``--repeat``;
* for the suite, a second floor: the same bytes read as the client reads them since replays name the
  positions they compare (``GenerateRequest.read_from``): each replay's prompt positions kept as raw bytes,
  only its last ``max_new_tokens`` decoded into arrays;
* the ratios, and the child's peak RSS (measured before the floors load the recording).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import itertools
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_engine import Recording, RecordingTransport

from precisionbot import corpus
from precisionbot.baselines.golden_recording import golden_target, record_golden
from precisionbot.checks import run_suite
from precisionbot.checks.golden import compare_golden
from precisionbot.config import Config, GoldenOptions, GoldenThresholds
from precisionbot.engines.sglang import SGLangEngine
from precisionbot.results import CONSISTENCY_CHECKS

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench_client"
PARTS = ("suite", "golden")


SMALL = False
"""``--small``: a seconds-long shape that checks the benchmark itself (not a figure to report)."""
SAMPLES: int | None = None
"""``--samples``: fewer prompts than the default suite's 32 (same lengths; the recording is then minutes shorter)."""


def _config() -> tuple[Config, Any]:
    config = Config.default()
    suite = config.suite("consistency")
    if SMALL:
        suite = dataclasses.replace(suite, samples=4, max_new_tokens=16, prompt_tokens=(128, 256))
    elif SAMPLES is not None:
        suite = dataclasses.replace(suite, samples=SAMPLES)
    return config, suite


def _golden_options() -> GoldenOptions:
    return GoldenOptions(context_depths=(256,), decode_steps=4) if SMALL else GoldenOptions()


def recording_path() -> Path:
    """One recording per suite and golden shape (a change of either records anew)."""
    _, suite = _config()
    shape = repr((suite.samples, suite.max_new_tokens, suite.prompt_tokens, suite.seed, _golden_options()))
    return CACHE / f"recording-{hashlib.sha256(shape.encode()).hexdigest()[:12]}.bin"


def _golden_target(engine: SGLangEngine, config: Config) -> Any:
    return golden_target(engine, config, _golden_options(), None, corpus.suite_documents(None))


def record(path: Path) -> None:
    """One real run of the builtin engine (CPU: minutes) with every answer filed in a ``Recording``."""
    from precisionbot.builtin import BuiltinServer, EngineOptions

    os.nice(10)
    config, suite = _config()
    rec = Recording()
    server = BuiltinServer(EngineOptions(), host="127.0.0.1", port=0).start()
    engine = SGLangEngine(server.url, kind="builtin", transport=RecordingTransport(httpx.HTTPTransport(), rec))
    t0 = time.perf_counter()
    try:
        rec.begin("suite")
        run = run_suite(engine, config, suite, checks=CONSISTENCY_CHECKS).result
        print(
            f"recorded the suite in {time.perf_counter() - t0:.0f} s: "
            + ", ".join(f"{c.name}={c.verdict.value}" for c in run.checks),
            flush=True,
        )
        with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
            from precisionbot.baselines import open_store

            store = open_store(f"{tmp}/store")
            target = _golden_target(engine, config)
            rec.begin("golden-record")
            record_golden(target, store)
            rec.begin("golden")
            out = compare_golden(target, store, GoldenThresholds())
            print(f"recorded golden: {out.result.verdict.value}", flush=True)
    finally:
        engine.close()
        server.stop()
    rec.save(path)
    print(f"recording: {path} ({path.stat().st_size / 2**20:.0f} MiB, {time.perf_counter() - t0:.0f} s)", flush=True)


# --- the floor: the same bytes, parsed and turned into arrays with nothing else ---


class _Entry(msgspec.Struct, array_like=True, gc=False):
    """``[logprob, token_id, text]`` with the text skipped (the floor builds arrays only)."""

    logprob: float | None
    token_id: int


class _Meta(msgspec.Struct, gc=False):
    input_token_logprobs: list[_Entry] | None = None
    output_token_logprobs: list[_Entry] | None = None
    input_top_logprobs: list[list[_Entry] | None] | None = None
    output_top_logprobs: list[list[_Entry] | None] | None = None


class _Answer(msgspec.Struct, gc=False):
    meta_info: _Meta


_TYPED = msgspec.json.Decoder(_Answer)
LIST_FIELDS = ("input_token_logprobs", "output_token_logprobs")
TOP_FIELDS = ("input_top_logprobs", "output_top_logprobs")


def floor_msgspec(item: bytes) -> int:
    """Typed decode, then one array per column; returns the positions read."""
    meta = _TYPED.decode(item).meta_info
    n = 0
    for name in LIST_FIELDS:
        entries = getattr(meta, name)
        if entries:
            np.array([e.logprob for e in entries], dtype=np.float64)
            np.array([e.token_id for e in entries], dtype=np.int64)
            n += len(entries)
    for name in TOP_FIELDS:
        rows = getattr(meta, name)
        if rows:
            flat = list(itertools.chain.from_iterable(rows[1:] if rows[0] is None else rows))
            np.array([e.logprob for e in flat], dtype=np.float64)
            np.array([e.token_id for e in flat], dtype=np.int64)
    return n


def floor_orjson(item: bytes) -> int:
    """Plain decode, then one array per column; returns the positions read."""
    meta = orjson.loads(item)["meta_info"]
    n = 0
    for name in LIST_FIELDS:
        entries = meta.get(name)
        if entries:
            np.array([e[0] for e in entries], dtype=np.float64)
            np.array([e[1] for e in entries], dtype=np.int64)
            n += len(entries)
    for name in TOP_FIELDS:
        rows = meta.get(name)
        if rows:
            flat = list(itertools.chain.from_iterable(rows[1:] if rows[0] is None else rows))
            np.array([e[0] for e in flat], dtype=np.float64)
            np.array([e[1] for e in flat], dtype=np.int64)
    return n


class _SkimMeta(msgspec.Struct, gc=False):
    completion_tokens: int = 0
    input_token_logprobs: list[msgspec.Raw] | None = None
    output_token_logprobs: list[_Entry] | None = None
    input_top_logprobs: list[msgspec.Raw] | None = None
    output_top_logprobs: list[list[_Entry] | None] | None = None


class _SkimAnswer(msgspec.Struct, gc=False):
    meta_info: _SkimMeta


_SKIM = msgspec.json.Decoder(_SkimAnswer)
_ROWS = msgspec.json.Decoder(list[_Entry])
_TOP_ROWS = msgspec.json.Decoder(list[list[_Entry]])


def floor_skim(item: bytes, tail: int) -> int:
    """The msgspec floor, reading a replay answer (top-k rows, no completion) as the client does since it
    learnt ``read_from``: every input position kept as raw bytes, only the last ``tail`` decoded."""
    meta = _SKIM.decode(item).meta_info
    entries, rows = meta.input_token_logprobs, meta.input_top_logprobs
    replay = meta.completion_tokens == 0 and bool(rows) and rows is not None and bytes(rows[-1]) not in (b"null", b"[]")
    n = 0
    if entries:
        read = entries[-tail:] if replay else entries
        decoded = _ROWS.decode(b"[" + b",".join(read) + b"]")
        np.array([e.logprob for e in decoded], dtype=np.float64)
        np.array([e.token_id for e in decoded], dtype=np.int64)
        n += len(entries)
    if meta.output_token_logprobs:
        np.array([e.logprob for e in meta.output_token_logprobs], dtype=np.float64)
        np.array([e.token_id for e in meta.output_token_logprobs], dtype=np.int64)
        n += len(meta.output_token_logprobs)
    if rows and replay:
        flat = list(itertools.chain.from_iterable(_TOP_ROWS.decode(b"[" + b",".join(rows[-tail:]) + b"]")))
        np.array([e.logprob for e in flat], dtype=np.float64)
        np.array([e.token_id for e in flat], dtype=np.int64)
    for top in (meta.output_top_logprobs,) if meta.output_top_logprobs else ():
        flat = list(itertools.chain.from_iterable(r for r in top if r))
        np.array([e.logprob for e in flat], dtype=np.float64)
        np.array([e.token_id for e in flat], dtype=np.int64)
    return n


def measure_skim_floor(items: list[bytes], repeat: int, tail: int) -> tuple[float, float]:
    """``floor_skim`` over every item: best of ``repeat``, wall and CPU seconds."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        t0, c0 = time.perf_counter(), time.process_time()
        for item in items:
            floor_skim(item, tail)
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
        gc.enable()
    return best


def measure_floor(items: list[bytes], repeat: int) -> tuple[float, float, str, int]:
    """The faster of the two floors (best of ``repeat``, wall and CPU seconds), its name, the positions read."""
    best: tuple[float, float, str, int] = (float("inf"), float("inf"), "", 0)
    for name, fn in (("msgspec", floor_msgspec), ("orjson", floor_orjson)):
        for _ in range(repeat):
            gc.collect()
            gc.disable()  # as the client does while it decodes (see precisionbot.engines.jsoncodec)
            t0, c0 = time.perf_counter(), time.process_time()
            positions = sum(fn(item) for item in items)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            gc.enable()
            best = min(best, (dt, dc, name, positions))
    return best


# --- one part, in a child process ---


def _served(url: str) -> dict[str, int]:
    return dict(httpx.get(f"{url}/_replay/served", trust_env=False).json())


def _reset(url: str) -> None:
    httpx.post(f"{url}/_replay/reset", trust_env=False).raise_for_status()


def _peak_rss_mib() -> float:
    """This process's peak RSS. ``VmHWM`` where Linux has it: ``ru_maxrss`` survives ``exec``, so a child would
    report its parent's peak (the recording run's engine) when that was larger."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(part: str, url: str, path: Path, repeat: int) -> dict[str, Any]:
    config, suite = _config()
    engine = SGLangEngine(url, batch_size=config.engine.batch_size, concurrency=config.engine.concurrency)
    times: list[float] = []
    cpu: list[float] = []
    served: list[dict[str, int]] = []
    verdicts = ""
    try:
        if part == "suite":
            for _ in range(repeat):
                _reset(url)
                t0, c0 = time.perf_counter(), time.process_time()
                run = run_suite(engine, config, suite, checks=CONSISTENCY_CHECKS).result
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                served.append(_served(url))
                verdicts = ", ".join(f"{c.name}={c.verdict.value}" for c in run.checks)
        else:
            from precisionbot.baselines import open_store

            with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
                store = open_store(f"{tmp}/store")
                _reset(url)
                target = _golden_target(engine, config)
                record_golden(target, store)  # the baseline, from the same recorded answers: not timed
                for _ in range(repeat):
                    before = _served(url)
                    t0, c0 = time.perf_counter(), time.process_time()
                    out = compare_golden(target, store, GoldenThresholds())
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                    after = _served(url)
                    served.append({k: after[k] - before[k] for k in after})
                    verdicts = f"golden={out.result.verdict.value}"
    finally:
        engine.close()
    rss_mib = _peak_rss_mib()  # before the floor loads the recording
    items = list(Recording.load(path).part_items(part))
    if any(s != {"items": len(items), "bytes": sum(map(len, items))} for s in served):
        raise SystemExit(f"{part}: the client received other answers than the recording's {part} part: {served}")
    floor_s, floor_cpu_s, floor_name, positions = measure_floor(items, repeat)
    skim_s, skim_cpu_s = measure_skim_floor(items, repeat, suite.max_new_tokens) if part == "suite" else (0.0, 0.0)
    return {
        "part": part,
        "client_s": min(times),
        "client_all_s": times,
        "client_cpu_s": cpu[times.index(min(times))],
        "floor_s": floor_s,
        "floor_cpu_s": floor_cpu_s,
        "floor": floor_name,
        "shape": f"{suite.samples} x {suite.max_new_tokens}",
        "skim_s": skim_s,
        "skim_cpu_s": skim_cpu_s,
        "positions": positions,
        "items": len(items),
        "mib": sum(map(len, items)) / 2**20,
        "rss_mib": rss_mib,
        "verdicts": verdicts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="record the answers anew")
    parser.add_argument("--record-only", action="store_true")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--samples", type=int, help="prompts in the suite (default: the default suite's 32)")
    parser.add_argument("--small", action="store_true", help="a tiny shape that checks the benchmark itself")
    parser.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global SMALL, SAMPLES
    SMALL, SAMPLES = args.small, args.samples
    path = recording_path()
    if args.child:
        print(orjson.dumps(child(args.child, args.url, path, args.repeat)).decode())
        return
    if args.record or not path.exists():
        record(path)
    if args.record_only:
        return
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("replay_engine.py")), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            raise SystemExit(f"the replay engine did not start: {ready}")
        url = ready[1]
        rows = []
        for part in PARTS:
            cmd = [sys.executable, __file__, "--child", part, "--url", url, "--repeat", str(args.repeat)]
            cmd += ["--small"] if args.small else []
            cmd += ["--samples", str(args.samples)] if args.samples else []
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
            rows.append(orjson.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=30)
    print(
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}, "
        f"orjson {orjson.__version__}, msgspec {msgspec.__version__}; best of {args.repeat}"
    )
    print(
        "| part | answers MiB | positions | client s (CPU s) | floor s (CPU s) | client / floor (CPU) "
        "| skimmed floor s (CPU s) | client / skimmed floor (CPU) | client ms per 1,000 positions | peak RSS MiB |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        name = f"suite (3 helpers, {r['shape']})" if r["part"] == "suite" else "golden compare"
        skim = (
            f"{r['skim_s']:.3f} ({r['skim_cpu_s']:.3f}) | {r['client_s'] / r['skim_s']:.2f} "
            f"({r['client_cpu_s'] / r['skim_cpu_s']:.2f})"
            if r["skim_s"]
            else "– | –"
        )
        print(
            f"| {name} | {r['mib']:.1f} | {r['positions']:,} | {r['client_s']:.3f} ({r['client_cpu_s']:.3f}) "
            f"| {r['floor_s']:.3f} ({r['floor_cpu_s']:.3f}, {r['floor']}) | {r['client_s'] / r['floor_s']:.2f} "
            f"({r['client_cpu_s'] / r['floor_cpu_s']:.2f}) | {skim} | {1e6 * r['client_s'] / r['positions']:.1f} "
            f"| {r['rss_mib']:.0f} |"
        )
    for r in rows:
        print(f"{r['part']}: {r['verdicts']}; every run s: {', '.join(f'{t:.3f}' for t in r['client_all_s'])}")
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(rows))


if __name__ == "__main__":
    main()
