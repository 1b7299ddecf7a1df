"""Diagnosis codes of hybrid models (restored-state and window bugs): ``recurrent_state`` and ``window_handoff``.

A hybrid engine (SGLang with mamba / linear-attention layers and sliding-window attention) reports
``mamba_track_interval`` and ``sliding_window_size`` in ``/server_info``; the run keeps them in its
``environment``. Two signatures then name the state:

* ``recurrent_state``: a cache helper diverges while ``match`` is clean, the divergence starts at the first
  generated token, and every diverging sample's ``cached_tokens`` sits on a checkpoint boundary (a multiple of
  ``mamba_track_interval``): the hit resumed from a stored recurrent/conv checkpoint, and that state is wrong
  (a stale checkpoint, a shifted conv window, a state restored into the wrong slot);
* ``window_handoff``: the divergence starts mid-generation where the sliding window fills — the generated
  tokens or the whole context reaching ``sliding_window_size`` — so the hand-off from "every key" to "the last
  W keys" (or the decode kernel's ring buffer) is wrong; or ``match``'s window-step rule failed (the
  logprob error steps up at the window's edge in most samples: ``stats.window_step``).

The two codes are spelled here and listed with the others in :data:`precisionbot.report.diagnosis.DIAGNOSIS_CODES`.
Pure: data in, findings appended; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from precisionbot.fmt import count, sig
from precisionbot.results import CheckResult, Diagnosis, Verdict
from precisionbot.scoring.window_step import step_fails

RECURRENT_STATE = "recurrent_state"
WINDOW_HANDOFF = "window_handoff"

WINDOW_EARLY_TOKENS = 16
WINDOW_LATE_TOKENS = 64
"""An onset counts as "at the window" from W - 16 to W + 64 tokens: the first token past the window may still
be within the onset threshold, so the first one over it comes a little later."""


def _int(environment: Mapping[str, Any], key: str) -> int | None:
    value = environment.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _stepped(c: CheckResult, window: int, out: list[Diagnosis]) -> bool:
    """``window_handoff`` from the window-step rule (``scoring.window_step``): where k3 rises, not its onset
    (under production noise a one-key window error rarely crosses the onset threshold right at the edge)."""
    step = c.stats.get("window_step")
    if not isinstance(step, Mapping):
        return False
    samples, stepped = step.get("samples"), step.get("stepped")
    if not isinstance(samples, int) or not isinstance(stepped, int) or not step_fails(samples, stepped):
        return False
    where = "generated token" if step.get("edge") == "generated" else "context length"
    ratio = step.get("median_ratio")
    shown = f"{sig(ratio)}x" if isinstance(ratio, (int, float)) else "a step"
    out.append(
        Diagnosis(
            WINDOW_HANDOFF,
            f"{c.name}: in {stepped} of {samples} samples the logprob error steps up at the sliding window's "
            f"edge ({where} {count(window)}; median after / before {shown}): the hand-off to the window — "
            "which keys decode keeps once the context passes it — differs from prefill's.",
            c.name,
        )
    )
    return True


def state_and_window(
    c: CheckResult, match: CheckResult | None, environment: Mapping[str, Any], out: list[Diagnosis]
) -> None:
    """Appends ``recurrent_state`` and/or ``window_handoff`` when ``c`` (a failed helper) shows them
    (``environment``: the run's; its server args name the boundaries)."""
    window = _int(environment, "sliding_window_size")
    stepped = window is not None and _stepped(c, window, out)
    div = [s for s in c.samples if s.onset is not None]
    if not div:
        return
    interval = _int(environment, "mamba_track_interval")
    match_clean = match is None or match.verdict is Verdict.PASS
    if interval is not None and c.name != "match" and match_clean:
        first = [s for s in div if s.onset == 0 or s.contiguous_from_first]
        cached = [s.cached_tokens for s in div if s.cached_tokens]
        if 2 * len(first) >= len(div) and cached and all(t % interval == 0 for t in cached):
            # A hybrid hit restores the checkpoint together with the KV pages below it (and, with a sliding
            # window, the window's pages): from outside, a wrong state and a wrong page restored with it look
            # alike, so the sentence names the state first and the pages as the other suspect.
            also = "the sliding-window or KV pages restored with it" if window else "the KV pages restored with it"
            out.append(
                Diagnosis(
                    RECURRENT_STATE,
                    f"{c.name}: every diverging sample's cache hit ends on a checkpoint boundary (cached tokens a "
                    f"multiple of mamba_track_interval {count(interval)}): the state restored at the hit is wrong — a "
                    f"stale or shifted recurrent/conv checkpoint, state restored into the wrong slot, or {also}.",
                    c.name,
                )
            )
    if window is None or stepped:
        return
    mid = [s for s in div if s.onset is not None and s.onset > 0 and not s.contiguous_from_first]
    at_window = [
        s
        for s in mid
        if s.onset is not None
        and any(
            window - WINDOW_EARLY_TOKENS <= where <= window + WINDOW_LATE_TOKENS
            for where in (s.onset, s.prompt_tokens + s.onset)
        )
    ]
    if mid and 2 * len(at_window) >= len(div):
        onsets = sorted(s.onset for s in at_window if s.onset is not None)
        out.append(
            Diagnosis(
                WINDOW_HANDOFF,
                f"{c.name}: in {len(at_window)} of {len(div)} diverging samples the divergence starts where the "
                f"sliding window ({count(window)} tokens) fills (generated token {count(onsets[len(onsets) // 2])} "
                "at the median): the hand-off to the window — which keys decode keeps once the context "
                "passes it — differs from prefill's.",
                c.name,
            )
        )
