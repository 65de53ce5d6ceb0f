#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test
# (CPU tier everywhere; the GPU tier runs on a GPU machine and says why it
# skips elsewhere).
#   scripts/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --parallel
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)"
