#!/usr/bin/env bash
# Copies the Debian headers and static GoogleTest that the build needs into
# .deps/ (git-ignored), for machines that have a compiler and CUDA but no
# Debian -dev packages (the GPU machine). Carry .deps along and configure with
#   -DASYNCSHIM_DEPS_DIR=$PWD/.deps -DGTEST_ROOT=$PWD/.deps
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
rm -rf .deps && mkdir -p .deps/include .deps/lib
cp -r /usr/include/fmt /usr/include/spdlog /usr/include/gtest .deps/include/
cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a .deps/lib/
du -sh .deps
