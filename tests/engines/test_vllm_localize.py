"""``precisionbot localize --engine-kind vllm`` against real vLLM servers (marker ``vllm``): the CPU build from
scripts/install-vllm.sh, the tiny fp32 Llama model, precisionbot's dumper plugin loaded through the entry points
in pyproject.toml (``dumper_dist``). One server is clean; the other also loads a planted-bug plugin that scales
layer 1's MLP output by 1 + 2^-7. The golden path must name exactly ``model.layers.1.mlp`` between them and
nothing between the clean server and itself. Both servers are shared by the module (each takes 1-2 min to
start on 2 loaded cores)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from precisionbot.cli import main
from tests.support.vllm import VLLMInstall, dumper_dist, dumper_server, general_plugin, install

pytestmark = pytest.mark.vllm

# The planted bug, inside the MLP module itself (a hook after the dumper's would perturb what the next module
# reads but not what the dump says the MLP wrote, and the layer would be named instead).
PERTURB_PLUGIN = """
import sys

SCALE = 1.0 + 2.0 ** -7


def register():
    from vllm.model_executor.models.llama import LlamaMLP

    if getattr(LlamaMLP, "_precisionbot_perturbed", False):
        return
    LlamaMLP._precisionbot_perturbed = True
    print("precisionbot perturb plugin registered", file=sys.stderr, flush=True)
    init, forward = LlamaMLP.__init__, LlamaMLP.forward

    def __init__(self, *args, prefix="", **kwargs):
        init(self, *args, prefix=prefix, **kwargs)
        self.precisionbot_scaled = prefix.endswith("layers.1.mlp")

    def perturbed(self, x):
        out = forward(self, x)
        return out * SCALE if self.precisionbot_scaled else out

    LlamaMLP.__init__ = __init__
    LlamaMLP.forward = perturbed
"""
PERTURB = "precisionbot_perturb_mlp"
ARGS = "--dtype float32"


def _perturb_dist(root: Path) -> Path:
    return general_plugin(root, "precisionbot_perturb_mlp", PERTURB_PLUGIN, PERTURB)


@pytest.fixture(scope="module")
def vllm() -> VLLMInstall:
    return install()


@pytest.fixture(scope="module")
def servers(vllm: VLLMInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``clean`` and ``pr`` (the planted bug) URLs, plus ``pr_log``: the PR server's log."""
    root = tmp_path_factory.mktemp("vllm-localize")
    dist = dumper_dist(root / "precisionbot-dist")
    model = vllm.model("llama")
    with ExitStack() as stack:
        clean = stack.enter_context(dumper_server(vllm, model, root / "clean", ARGS, {"precisionbot_dumper": dist}))
        plugins = {"precisionbot_dumper": dist, PERTURB: _perturb_dist(root / "perturb")}
        pr = stack.enter_context(dumper_server(vllm, model, root / "pr", ARGS, plugins))
        yield {"clean": clean, "pr": pr, "pr_log": str(root / "pr" / "vllm.log")}


def _localize(target: str, baseline: str, out: Path) -> tuple[int, dict[str, Any]]:
    argv = ["localize", "--engine-url", target, "--baseline-url", baseline, "--engine-kind", "vllm"]
    code = main([*argv, "--path", "golden", "--out", str(out)])
    return code, json.loads((out / "localization.json").read_text())


@pytest.fixture(scope="module")
def planted(servers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    """The PR server localized against the clean one: exit code, localization.json, output folder."""
    out = tmp_path_factory.mktemp("planted")
    return (*_localize(servers["pr"], servers["clean"], out), out)


def test_the_planted_mlp_bug_is_named_exactly(
    servers: dict[str, str], planted: tuple[int, dict[str, Any], Path]
) -> None:
    assert "precisionbot perturb plugin registered" in Path(servers["pr_log"]).read_text()
    code, summary, _ = planted
    first = summary["first_diverging_op"]
    assert code == 1, summary
    assert isinstance(first, dict) and first["module"] == "model.layers.1.mlp", summary
    assert float(first["rel_diff"]) > 0.0
    assert "model.layers.1" in summary["inheriting"] and "model.norm" in summary["inheriting"], summary
    # Every module before it agrees bit for bit, so the comparison saw them all.
    assert summary["modules"][:5] == ["model.embed_tokens", "model.layers.0.input_layernorm",
                                      "model.layers.0.self_attn", "model.layers.0.post_attention_layernorm",
                                      "model.layers.0.mlp"]  # fmt: skip


def test_the_dumps_are_sglangs_files(planted: tuple[int, dict[str, Any], Path]) -> None:
    """The PR server's dump of that run, read as SGLang's files: names, tags and ``{"value", "meta"}``."""
    import torch

    folder = planted[2] / "dumps" / "target"
    names = {p.name for p in folder.iterdir()}
    pattern = r"step=\d+___rank=0___dump_index=\d+___name={}___recompute_status=disabled{}\.pt"
    for tensor, tag in [
        ("positions", ""),
        ("input_ids", ""),
        ("non_intrusive__model.embed_tokens.output", ""),
        ("non_intrusive__model.layers.1.mlp.inputs.0", "___layer_id=1"),
        ("non_intrusive__model.layers.1.mlp.output", "___layer_id=1"),
        ("non_intrusive__model.layers.1.inputs.1", "___layer_id=1"),
        ("non_intrusive__model.layers.1.output.0", ""),  # a layer's own output carries no layer id, as in SGLang
        ("non_intrusive__model.norm.output.0", ""),
    ]:
        regex = re.compile(pattern.format(re.escape(tensor), tag))
        assert sum(bool(regex.fullmatch(n)) for n in names) == 1, (tensor, sorted(names)[:20])
    mlp = next(n for n in names if "name=non_intrusive__model.layers.1.mlp.output" in n)
    data = torch.load(folder / mlp, weights_only=True)
    assert data["meta"]["name"] == "non_intrusive__model.layers.1.mlp.output" and data["meta"]["layer_id"] == 1
    positions = next(n for n in names if "name=positions" in n)
    rows = torch.load(folder / positions, weights_only=True)["value"]
    assert data["value"].shape[0] == rows.shape[0] and rows.tolist() == list(range(rows.shape[0]))


def test_the_clean_server_names_none(servers: dict[str, str], tmp_path: Path) -> None:
    code, summary = _localize(servers["clean"], servers["clean"], tmp_path / "out")
    assert code == 0, summary
    assert summary["first_diverging_op"] is None
    assert len(summary["modules"]) == 12  # embedding, 5 per layer, final norm (no lm_head module runs in vLLM)
    hits = summary["hook_hits"]
    assert isinstance(hits, list) and hits[0] == hits[1] > 0


def test_get_state_reports_what_the_guards_need(servers: dict[str, str]) -> None:
    with httpx.Client(base_url=servers["clean"], timeout=60) as client:
        answer = client.post("/dumper/get_state", json={}).json()
        bad = client.post("/dumper/configure", json={"no_such_field": 1})
    assert len(answer) == 1, answer  # one rank
    state = answer[0]
    assert state["config"]["enable"] is False and state["config"]["non_intrusive_mode"] == "all"
    assert state["vllm"]["enforce_eager"] is True and state["vllm"]["compilation_mode"] == 0
    assert state["vllm"]["hooked_modules"] == 12
    assert bad.status_code == 400 and "unknown field 'no_such_field'" in bad.json()["error"][0]


def test_a_helper_path_is_refused_by_name(
    servers: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["localize", "--engine-url", servers["clean"], "--engine-kind", "vllm", "--path", "decode"]
    code = main([*argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3
    assert "--enable-deterministic-inference" in err and "--path golden" in err, err
