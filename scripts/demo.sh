#!/usr/bin/env bash
# The main job: installs what is missing, builds, and compares the bundled demo
# (a program that allocates per request) without and with libasyncshim.so using
# the A/B wrapper (asyncshim-ab). Without a GPU it builds everything and says
# plainly that the demo needs one.
#   scripts/demo.sh [requests]
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-3000}
build=build

echo "demo: 1/4 installing what is missing (scripts/install-deps.sh)"
scripts/install-deps.sh
echo "demo: 2/4 configuring $build/ (Release)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# Ninja's own [done/total] counter, on one line of its own on a terminal (a
# few minutes on two cores: the tests are built too).
echo "demo: 3/4 building the shim, its tools, the demo and the tests"
progress() {  # ninja's lines -> one counter that overwrites itself
  local line
  while IFS= read -r line; do
    if [[ "$line" =~ ^\[([0-9]+/[0-9]+)\] ]]; then printf '\r  %s' "${BASH_REMATCH[1]}"; fi
  done
  echo
}
if [[ -t 1 ]]; then
  built() { cmake --build "$build" --parallel | progress; }
else
  built() { cmake --build "$build" --parallel >/dev/null; }
fi
if ! built; then
  echo "demo: the build failed; again, with its output:"
  cmake --build "$build"
  exit 1
fi
shim=$PWD/$build/shim/libasyncshim.so
demo=$PWD/$build/tests/demo/alloc_per_request
echo "built $shim"

if [[ ! -x "$demo" ]]; then
  echo "nvcc was not found, so the demo program was not built; the shim itself is ready."
  exit 0
fi
if ! "$demo" 1 >/dev/null 2>&1; then
  echo "No CUDA GPU (or driver) on this machine: the demo compares allocation speed on a GPU, so it cannot run here."
  echo "Everything is built; scripts/test.sh runs the tests that do not need a GPU."
  exit 0
fi

echo "demo: 4/4 running: $requests requests, each 3 cudaMalloc + 3 cudaFree around two small kernels"
echo "asyncshim-ab -- $demo $requests"
# A pool primed with 1 GiB, as a long-running server's pool would have grown to (the
# default starts empty and grows).
ASYNCSHIM_INITIAL_POOL_SIZE=${ASYNCSHIM_INITIAL_POOL_SIZE:-1GiB} "$build/bin/asyncshim-ab" -- "$demo" "$requests"
