"""The hybrid-model codes (``recurrent_state``, ``window_handoff``): when the run's engine reports SGLang's
``mamba_track_interval`` / ``sliding_window_size``, and only then."""

from __future__ import annotations

import dataclasses

from precisionbot.report import diagnose
from precisionbot.results import CheckResult
from tests.report.test_diagnosis import F, P, chk, codes

HYBRID = {"mamba_track_interval": 64, "sliding_window_size": 256, "page_size": 16}


def _cached(c: CheckResult, step: int) -> CheckResult:
    return dataclasses.replace(
        c, samples=tuple(dataclasses.replace(s, cached_tokens=1024 + step * s.sample) for s in c.samples)
    )


def test_a_cache_hit_on_checkpoint_boundaries_diverging_from_the_first_token_is_the_recurrent_state() -> None:
    checks = [chk("match", P), chk("prefill_cache_hit", F), chk("decode_cache_hit", F)]
    found = codes(checks, environment=HYBRID)
    assert {"recurrent_state", "prefill_restore", "onset_first_token"} <= set(found)
    assert "window_handoff" not in found
    (finding,) = [d for d in diagnose(checks, environment=HYBRID) if d.code == "recurrent_state"]
    assert finding.check == "prefill_cache_hit" and "mamba_track_interval 64" in finding.text
    # From outside a wrong checkpoint and a wrong page restored with it look alike: both are named.
    assert "recurrent/conv checkpoint" in finding.text and "sliding-window or KV pages" in finding.text


def test_no_recurrent_state_without_a_hybrid_engine_off_boundaries_or_when_match_diverges() -> None:
    checks = [chk("match", P), chk("prefill_cache_hit", F)]
    assert "recurrent_state" not in codes(checks)  # a dense engine: no checkpoints to blame
    off = [chk("match", P), _cached(chk("prefill_cache_hit", F), 16)]  # cached 1040, 1056, ...: page-aligned only
    assert "recurrent_state" not in codes(off, environment=HYBRID)
    assert "recurrent_state" not in codes([chk("match", F), chk("prefill_cache_hit", F)], environment=HYBRID)
    late = [chk("match", P), chk("prefill_cache_hit", F, onset=40, contiguous=False)]
    assert "recurrent_state" not in codes(late, environment=HYBRID)


def test_an_onset_where_the_window_fills_is_a_window_handoff() -> None:
    checks = [chk("match", F, onset=262, contiguous=False)]
    found = codes(checks, environment=HYBRID)
    assert {"arithmetic", "window_handoff", "onset_mid_generation"} <= set(found)
    (finding,) = [d for d in diagnose(checks, environment=HYBRID) if d.code == "window_handoff"]
    assert "sliding window (256 tokens)" in finding.text and "generated token 262" in finding.text


def test_no_window_handoff_far_from_the_window_or_without_one() -> None:
    assert "window_handoff" not in codes([chk("match", F, onset=100, contiguous=False)], environment=HYBRID)
    assert "window_handoff" not in codes([chk("match", F, onset=262, contiguous=False)])
    assert "window_handoff" not in codes([chk("match", F)], environment=HYBRID)  # from the first token: not a hand-off
