#!/usr/bin/env bash
# Create or refresh .venv and install precisionbot with the given extras.
# Sourced by scripts/demo and scripts/test; safe to run again (pip skips what is there).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PRECISIONBOT_VENV:-$root/.venv}"
extras="${1:-engine}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "precisionbot: creating virtual environment $venv" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.precisionbot-$extras"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "precisionbot: installing .[$extras] into $venv (first run takes a few minutes)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # torch's CPU build: this exact version resolves to the CPU wheel on CPU-only machines, while an
  # unpinned torch pulls a multi-GB CUDA build. GPU hosts install their own torch and skip these scripts.
  # PRECISIONBOT_TORCH_INDEX_URL points pip at a CPU-only wheel index where the default one serves CUDA builds.
  torch_index=()
  if [ -n "${PRECISIONBOT_TORCH_INDEX_URL:-}" ]; then torch_index=(--index-url "$PRECISIONBOT_TORCH_INDEX_URL"); fi
  "$venv/bin/python" -m pip install --quiet "${torch_index[@]}" "torch==${PRECISIONBOT_TORCH_VERSION:-2.13.0}"
  "$venv/bin/python" -m pip install --quiet -e "$root[$extras]"
  touch "$stamp"
fi
