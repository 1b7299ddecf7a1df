"""The localization in words (finding.py), the comment's "What it points to" sentence from result.json's
``localization`` (report/diagnosis.py), and the ``localize:`` config key."""

from __future__ import annotations

import pytest

from precisionbot.config import Config, from_mapping
from precisionbot.errors import ConfigError
from precisionbot.localize.finding import module_kind, where
from precisionbot.report.diagnosis import diagnose

HYBRID = ["full", "gdn", "swa"]


@pytest.mark.parametrize(
    ("module", "kind"),
    [
        ("model.layers.0.self_attn", "attention"),
        ("model.layers.2.self_attn", "sliding-window attention"),
        ("model.layers.1.linear_attn", "recurrent mixer"),
        ("model.layers.1.mlp", "MLP"),
        ("model.layers.1", "decoder layer (its residual stream)"),
        ("model.layers.0.input_layernorm", "norm"),
        ("model.embed_tokens", "embedding"),
        ("lm_head", "LM head"),
        ("", "model"),
    ],
)
def test_module_kind(module: str, kind: str) -> None:
    assert module_kind(module, HYBRID) == kind


def test_where_counts_decode_steps_from_one() -> None:
    assert where(96, "decode", 96) == "decode step 1 (position 96)"
    assert where(95, "decode", 96) == "position 95"
    assert where(130, "prefill-cache-hit", 96) == "position 130"


FOUND = {
    "check": "match",
    "first_diverging_op": {
        "module": "model.layers.1.linear_attn",
        "kind": "recurrent mixer",
        "where": "decode step 3 (position 99)",
        "rel_diff": 0.0412,
    },
    "aligned_positions": 103,
}


def test_the_comment_names_the_op_first() -> None:
    first = diagnose((), localization=FOUND)[0]
    assert first.code == "first_diverging_op" and first.check == "match"
    assert first.text == (
        "first diverging op: model.layers.1.linear_attn (recurrent mixer) at decode step 3 (position 99): "
        "inputs identical, output rel_diff 0.041"
    )


def test_every_localized_check_is_named_with_the_sample_it_was_found_at() -> None:
    golden = {
        "check": "golden",
        "sample": 1,
        "baseline_run": "20261203T000000000000Z-default-0",
        "first_diverging_op": {
            "module": "positions",
            "kind": "the forward batch's positions",
            "where": "position 512",
            "differs": "the baseline gives the token position 512, the target 511",
        },
    }
    both = diagnose((), localization=[{**FOUND, "sample": 2}, golden])
    assert [d.check for d in both[:2]] == ["match", "golden"]
    assert both[0].text.startswith(
        "first diverging op: model.layers.1.linear_attn (recurrent mixer) at decode step 3 (position 99) of "
        "match's sample 2: inputs identical"
    )
    assert both[1].text == (
        "first diverging op: positions (the forward batch's positions) at position 512 of golden's sample 1 "
        "(against the baseline build's stored tensors): the baseline gives the token position 512, the target 511"
    )


def test_a_localization_without_an_answer_says_why_or_that_nothing_differs() -> None:
    refused = diagnose((), localization={"check": "match", "error": "localize refuses: DUMPER_ENABLE=0: ..."})
    assert refused[0].text.startswith("match not localized: localize refuses: DUMPER_ENABLE=0")
    none = diagnose((), localization={**FOUND, "first_diverging_op": None})
    assert none[0].text == "localized: no op differs at the 103 positions re-run"
    assert diagnose((), localization=None) == ()
    assert diagnose((), localization={"first_diverging_op": {"module": 3}}) == ()


def test_localize_config_key() -> None:
    config = from_mapping({"localize": {"enabled": True, "max_new_tokens": 12}})
    assert config.localize.enabled and config.localize.max_new_tokens == 12
    assert not Config.default().localize.enabled
    with pytest.raises(ConfigError, match=r"localize.max_new_tokens.*must be >= 2"):
        from_mapping({"localize": {"max_new_tokens": 1}})
    with pytest.raises(ConfigError, match="localize"):
        from_mapping({"localize": {"enable": True}})
