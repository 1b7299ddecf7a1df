#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the source vendored in the pinned llama-cpp-python sdist, once.
#
# The real-engine tests (pytest marker `llamacpp`) run precisionbot against this binary. The sdist is pinned by
# version and sha256 so every machine builds the same llama.cpp (vendored commit 0c1e570); the result lives in a
# git-ignored cache directory and the script is a no-op when the binary is already there.
#
#   scripts/build-llama-server.sh           build (or reuse) .cache/llama.cpp-0.3.36/llama-server
#   LLAMACPP_CACHE=/some/dir scripts/...    put the cache elsewhere
#
# Only the llama-server target is built: no tests, examples, web UI download, OpenSSL or CURL. When cmake or a C++
# compiler is missing it installs them with apt-get if it runs as root, else it exits 3 and says what is missing
# (the tests then skip with that reason).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="0.3.36"
sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
cache="${LLAMACPP_CACHE:-$root/.cache/llama.cpp-$version}"
jobs="${LLAMACPP_JOBS:-2}"
binary="$cache/llama-server"
vocab="$cache/ggml-vocab-llama-spm.gguf"

mkdir -p "$cache"
# One build at a time: scripts/test starts this in the background and a test may start it too.
exec 9>"$cache/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ -x "$binary" ] && [ -f "$vocab" ]; then
  echo "llama-server $version already built: $binary" >&2
  exit 0
fi

missing=()
for tool in cmake c++ make; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make >/dev/null
  else
    echo "cannot build llama-server: missing ${missing[*]} (install cmake and a C++ compiler)" >&2
    echo "missing ${missing[*]}" >"$cache/unavailable"
    exit 3
  fi
fi

python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "downloading llama-cpp-python==$version (sdist)" >&2
"$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
archive="$work/llama_cpp_python-$version.tar.gz"
echo "$sdist_sha256  $archive" | sha256sum --check --quiet - || {
  echo "sha256 mismatch for $archive: refusing to build" >&2
  exit 4
}
tar -xzf "$archive" -C "$work" "llama_cpp_python-$version/vendor/llama.cpp"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"

echo "building llama-server (Release, -j$jobs) in $work" >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$cache/build.log" 2>&1 \
  || { tail -40 "$cache/build.log" >&2; exit 1; }
cmake --build "$work/build" --config Release --target llama-server -j "$jobs" >>"$cache/build.log" 2>&1 \
  || { tail -40 "$cache/build.log" >&2; exit 1; }
cp "$src/models/ggml-vocab-llama-spm.gguf" "$vocab.tmp" && mv "$vocab.tmp" "$vocab"
cp "$work/build/bin/llama-server" "$binary.tmp" && mv "$binary.tmp" "$binary"
rm -f "$cache/unavailable"
echo "built $binary" >&2
