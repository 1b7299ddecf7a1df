"""Main's speculative acceptance stored with a golden run: its entry round-trips, a damaged or foreign one is a
clear reason (never a figure), and selection picks the newest good run of the same parameters, saying why
there is none otherwise."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from precisionbot.baselines import RunMeta, Signature, new_run_id, now_utc, open_store, write_run
from precisionbot.baselines.spec_acceptance import (
    KEY,
    NOT_RECORDED,
    SIZES_DIFFER,
    UNUSABLE,
    AcceptanceReruns,
    acceptance_params,
    select_acceptance,
)
from precisionbot.baselines.store import CorruptObject, Store
from precisionbot.config import Config
from precisionbot.scoring.spec_rules import Acceptance, SampleAcceptance

SIGNATURE = Signature.build(model="m", tp=1, corpus="c", check_params="p")
SUITE = dataclasses.replace(Config.default().suite("pr"), samples=4, max_new_tokens=32, prompt_tokens=(64, 96))
PARAMS = acceptance_params(SUITE, {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4})
RERUNS = AcceptanceReruns(PARAMS, (Acceptance(40, 120, 30), Acceptance(40, 120, 32), Acceptance(41, 123, 30)))


def test_params_name_the_sizes_and_the_speculation_where_known() -> None:
    expected = {
        "samples": 4,
        "max_new_tokens": 32,
        "prompt_tokens": [64, 96],
        "corpus": "builtin",
        "seed": SUITE.seed,
        "speculative_algorithm": "NGRAM",
        "speculative_num_draft_tokens": 4,
    }
    assert expected == PARAMS
    # vLLM's server info does not say them; nonsense is not kept either.
    unknown = acceptance_params(SUITE, {"speculative_algorithm": True, "speculative_num_draft_tokens": [3]})
    assert unknown["speculative_algorithm"] is None and unknown["speculative_num_draft_tokens"] is None


def test_the_entry_round_trips_with_its_figures_and_summary() -> None:
    extra = RERUNS.to_extra()
    assert extra["version"] == 1 and len(extra["reruns"]) == 3
    assert extra["reruns"][0] == {
        "verify_steps": 40,
        "drafts": 120,
        "accepted": 30,
        "accept_length": 1.75,
        "accept_rate": 0.25,
    }
    back = AcceptanceReruns.from_extra(extra, "here")
    assert back == RERUNS
    main = back.main("run-1")
    assert main.stored and main.baseline == "run-1" and main.lengths == RERUNS.lengths
    summary = RERUNS.summary()
    assert summary["reruns"] == 3 and summary["accept_length_max"] == 1.8
    assert summary["accept_length_min"] == pytest.approx(1 + 30 / 41)


def _damaged(change: Any) -> dict[str, Any]:
    extra = copy.deepcopy(RERUNS.to_extra())
    change(extra)
    return extra


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda e: e.update(version=2), "format version 2; this precisionbot reads version 1"),
        (lambda e: e.pop("params"), "lacks its params or reruns"),
        (lambda e: e.update(reruns=e["reruns"][:2]), "has 2 rerun(s); main's spread needs at least 3"),
        (lambda e: e["reruns"][1].update(accepted=500), "more tokens accepted than drafted"),
        (lambda e: e["reruns"][1].update(drafts=True), "must be whole numbers"),
        (lambda e: e["reruns"][2].update(accept_length=3.5), "accept_length 3.5 is not what its counters give"),
        (lambda e: e["reruns"][2].update(accept_rate="NaN"), "accept_rate 'NaN' is not what its counters give"),
        (lambda e: e["reruns"].__setitem__(0, [1, 2]), "rerun 1 is not an object"),
    ],
)
def test_a_damaged_entry_is_corrupt_naming_what(change: Any, said: str) -> None:
    with pytest.raises(CorruptObject, match="stored acceptance here") as caught:
        AcceptanceReruns.from_extra(_damaged(change), "here")
    assert said in str(caught.value)
    with pytest.raises(CorruptObject, match="not an object"):
        AcceptanceReruns.from_extra([1], "here")


def _sample(text: str, accepted: int) -> SampleAcceptance:
    return SampleAcceptance(text, Acceptance(10, 30, accepted))


PER_SAMPLE = dataclasses.replace(RERUNS, samples=tuple((_sample("a1b2", 8), _sample("c3d4", n)) for n in (7, 9, 7)))


def test_per_sample_rows_round_trip_and_reach_mains_figure() -> None:
    extra = PER_SAMPLE.to_extra()
    assert extra["reruns"][1]["samples"] == [["a1b2", 10, 30, 8], ["c3d4", 10, 30, 9]]
    back = AcceptanceReruns.from_extra(extra, "here")
    assert back == PER_SAMPLE and back.main("run-1").samples == PER_SAMPLE.samples
    # An entry without them (an engine with server-wide counters only, or an older record) still reads.
    assert AcceptanceReruns.from_extra(RERUNS.to_extra(), "here").samples == ()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda e: e["reruns"][1].pop("samples"), "rerun 2 samples: every rerun must list the same number"),
        (lambda e: e["reruns"][2]["samples"].pop(), "rerun 3 samples: every rerun must list the same number"),
        (lambda e: e["reruns"][0]["samples"][1].pop(), "rerun 1 samples[1]: expected [text digest, verify_steps"),
        (lambda e: e["reruns"][0]["samples"][0].__setitem__(3, 31), "samples[0]: more tokens accepted than drafted"),
        (lambda e: e["reruns"][0]["samples"][0].__setitem__(1, -1), "samples[0]: verify_steps, drafts, accepted must"),
    ],
)
def test_damaged_per_sample_rows_are_corrupt_naming_the_row(change: Any, said: str) -> None:
    extra = copy.deepcopy(PER_SAMPLE.to_extra())
    change(extra)
    with pytest.raises(CorruptObject, match="stored acceptance here") as caught:
        AcceptanceReruns.from_extra(extra, "here")
    assert said in str(caught.value)


def _write(store: Store, entry: Any, *, label: str = "baseline_established", signature: Signature = SIGNATURE) -> str:
    when = now_utc()
    meta = RunMeta(
        new_run_id(when, "default"),
        "m",
        signature.digest,
        signature.parts,
        when.isoformat(),
        label,
        "default",
        extra={} if entry is None else {KEY: entry},
    )
    return write_run(store, meta, {}).run_id


def test_selection_takes_the_newest_good_run_of_the_same_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(str(tmp_path / "store"))
    found = select_acceptance(store, "m", SIGNATURE.digest, PARAMS)
    assert found[0] is None and str(found[1]).startswith("no baseline of model 'm' with signature")

    old = _write(store, None)  # recorded before acceptance was stored (or without spec_decode)
    found = select_acceptance(store, "m", SIGNATURE.digest, PARAMS)
    assert found[0] is None and f"the baseline {old} {NOT_RECORDED}" in str(found[1])

    other = {**PARAMS, "samples": 8}
    _write(store, AcceptanceReruns(other, RERUNS.reruns).to_extra())
    found = select_acceptance(store, "m", SIGNATURE.digest, PARAMS)
    assert found[0] is None and str(found[1]).startswith(f"{SIZES_DIFFER} (samples 8 vs 4, main's vs this run's)")

    good = _write(store, RERUNS.to_extra())
    _write(store, RERUNS.to_extra(), label="failed")  # a failed run is never main
    _write(store, RERUNS.to_extra(), signature=Signature.build(model="m", tp=2, corpus="c", check_params="p"))
    meta, reruns = select_acceptance(store, "m", SIGNATURE.digest, PARAMS)
    assert isinstance(meta, RunMeta) and meta.run_id == good and reruns == RERUNS

    # A newer run whose entry is damaged is skipped with a warning; the good one still serves.
    _write(store, _damaged(lambda e: e["reruns"][0].update(accepted=-1)))
    meta, _ = select_acceptance(store, "m", SIGNATURE.digest, PARAMS)
    assert isinstance(meta, RunMeta) and meta.run_id == good
    assert "skipped corrupt run" in capsys.readouterr().err


def test_only_damaged_entries_of_the_parameters_are_a_reason_not_a_figure(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    _write(store, _damaged(lambda e: e.update(version=9)))
    found = select_acceptance(store, "m", SIGNATURE.digest, PARAMS)
    assert found[0] is None and str(found[1]).startswith(UNUSABLE) and "format version 9" in str(found[1])
