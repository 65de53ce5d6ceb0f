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

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --parallel >/dev/null
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

echo "demo: $requests requests, each 3 cudaMalloc + 3 cudaFree around two small kernels"
echo "asyncshim-ab -- $demo $requests"
# A pool primed with 1 GiB, as a long-running server's pool would have grown to (the
# default starts empty and grows).
ASYNCSHIM_INITIAL_POOL_SIZE=${ASYNCSHIM_INITIAL_POOL_SIZE:-1GiB} "$build/bin/asyncshim-ab" -- "$demo" "$requests"
