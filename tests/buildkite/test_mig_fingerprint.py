"""The MIG slice in the environment fingerprint: parsed from ``nvidia-smi -L`` text (pure), gathered on the host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from precisionbot.baselines import host
from precisionbot.baselines.fingerprint import FINGERPRINT_KEYS, build_fingerprint, fingerprint_diff, mig_profile

# `nvidia-smi -L` on an H200 host split into MIG slices (UUIDs shortened to their shape), as an agent of a
# MIG-split queue sees it.
MIG_LISTING = """\
GPU 0: NVIDIA H200 (UUID: GPU-5e1b2c3d-0a1b-2c3d-4e5f-60718293a4b5)
  MIG 3g.71gb     Device  0: (UUID: MIG-1c3f5a7e-9b0d-5e2f-8a4c-6d1e3f5a7b9c)
  MIG 3g.71gb     Device  1: (UUID: MIG-2d4e6f80-a1b2-5c3d-9e4f-7a8b9c0d1e2f)
GPU 1: NVIDIA H200 (UUID: GPU-6f2c3d4e-1b2c-3d4e-5f60-718293a4b5c6)
  MIG 1g.18gb     Device  0: (UUID: MIG-3e5f7a9b-b2c3-5d4e-a5f6-8b9c0d1e2f3a)
  MIG 1g.18gb+me  Device  1: (UUID: MIG-4f6a8b0c-c3d4-5e5f-b6a7-9c0d1e2f3a4b)
"""
WHOLE = """\
GPU 0: NVIDIA H200 (UUID: GPU-5e1b2c3d-0a1b-2c3d-4e5f-60718293a4b5)
GPU 1: NVIDIA H200 (UUID: GPU-6f2c3d4e-1b2c-3d4e-5f60-718293a4b5c6)
"""


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("MIG-1c3f5a7e-9b0d-5e2f-8a4c-6d1e3f5a7b9c", "3g.71gb"),
        ("MIG-3e5f7a9b-b2c3-5d4e-a5f6-8b9c0d1e2f3a,MIG-1c3f5a7e-9b0d-5e2f-8a4c-6d1e3f5a7b9c", "1g.18gb+3g.71gb"),
        ("MIG-GPU-6f2c3d4e-1b2c-3d4e-5f60-718293a4b5c6/1/0", "1g.18gb+1g.18gb+me"),
        ("0", "3g.71gb+3g.71gb"),
        (None, "1g.18gb+1g.18gb+me+3g.71gb+3g.71gb"),
        ("MIG-00000000-0000-0000-0000-000000000000", "1g.18gb+1g.18gb+me+3g.71gb+3g.71gb"),
    ],
)
def test_the_slices_cuda_visible_devices_picks(visible: str | None, expected: str) -> None:
    assert mig_profile(MIG_LISTING, visible) == expected


def test_whole_gpus_and_other_text_have_no_slice() -> None:
    assert mig_profile(WHOLE, "0") is None
    assert mig_profile("", None) is None
    assert mig_profile("NVIDIA H200, 550.54.15\n", None) is None  # the CSV query's answer
    assert mig_profile("  MIG 3g.71gb     Device  0: (UUID: MIG-1c3f)\n", None) is None  # no GPU line above it


def test_fingerprints_without_mig_keep_their_keys_and_a_slice_differs_from_a_whole_gpu() -> None:
    whole = build_fingerprint(gpu_model="NVIDIA H200", gpu_count=1, driver="550.54")
    assert list(whole) == list(FINGERPRINT_KEYS)  # unchanged: no gpu_mig key at all
    sliced = build_fingerprint(gpu_model="NVIDIA H200", gpu_count=1, driver="550.54", gpu_mig="3g.71gb")
    assert sliced["gpu_mig"] == "3g.71gb"
    assert fingerprint_diff(whole, sliced) == ["gpu_mig: baseline (whole GPU), now 3g.71gb"]
    assert fingerprint_diff(sliced, whole) == ["gpu_mig: baseline 3g.71gb, now (whole GPU)"]
    other = build_fingerprint(gpu_model="NVIDIA H200", gpu_count=1, driver="550.54", gpu_mig="1g.18gb")
    assert fingerprint_diff(sliced, other) == ["gpu_mig: baseline 3g.71gb, now 1g.18gb"]
    assert fingerprint_diff(whole, whole) == [] and fingerprint_diff(sliced, sliced) == []
    assert fingerprint_diff({}, sliced) == []  # a baseline recorded before fingerprints: nothing known


def test_the_host_reads_nvidia_smi_and_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    listing = tmp_path / "listing.txt"
    listing.write_text(MIG_LISTING)
    smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] && cat {listing} && exit 0\nprintf "NVIDIA H200, 550.54.15\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2d4e6f80-a1b2-5c3d-9e4f-7a8b9c0d1e2f")
    try:
        host.gpu_mig.cache_clear()
        host.gpu_inventory.cache_clear()
        assert host.gpu_mig() == "3g.71gb"
        assert host.gather_fingerprint({}, None)["gpu_mig"] == "3g.71gb"
        listing.write_text(WHOLE)
        host.gpu_mig.cache_clear()
        assert "gpu_mig" not in host.gather_fingerprint({}, None)
    finally:
        host.gpu_mig.cache_clear()
        host.gpu_inventory.cache_clear()
