#!/usr/bin/env bash
# The test command: installs what is missing, checks the code style
# (scripts/format.sh --check), builds a Release tree (what people install)
# and runs every test in it (CPU tier everywhere; the GPU tier runs on a GPU
# machine and says why it skips elsewhere; config.fuzz fuzzes the
# environment parser for 30 s), then builds a second tree, Debug with
# AddressSanitizer and UndefinedBehaviorSanitizer ("<build-dir>-sanitize",
# ASYNCSHIM_SANITIZE=ON), and a third, Debug with ThreadSanitizer
# ("<build-dir>-tsan", ASYNCSHIM_SANITIZE=thread), and runs the CPU tier in
# each. After each run it prints why the skipped tests skipped, one line per
# reason (scripts/skip-reasons.py).
#   scripts/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
sanitize=${build}-sanitize
tsan=${build}-tsan
# A test that sets no TIMEOUT of its own fails after this many seconds: a
# hang is a named failure, not a run that never ends.
test_timeout=600

scripts/install-deps.sh --fuzz --style
status=0
scripts/format.sh --check || status=$?
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DASYNCSHIM_FUZZ=ON >/dev/null
cmake --build "$build" --parallel
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" --timeout "$test_timeout" || status=$?
python3 scripts/skip-reasons.py "$build/Testing/Temporary/LastTest.log"  # why the skipped ones skipped

# The sanitizer tree (cmake/sanitizers.cmake): the CPU tier only. The fuzz
# test is left out (the fuzzer is built with the sanitizers anyway); the GPU
# tier's programs are built but not run (-LE gpu).
echo "asyncshim: the CPU tier again, built with -fsanitize=address,undefined, in $sanitize"
cmake -S . -B "$sanitize" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DASYNCSHIM_SANITIZE=ON -DASYNCSHIM_FUZZ=OFF >/dev/null
cmake --build "$sanitize" --parallel
ctest --test-dir "$sanitize" --output-on-failure --parallel "$(nproc)" --timeout "$test_timeout" -LE gpu || status=$?
python3 scripts/skip-reasons.py "$sanitize/Testing/Temporary/LastTest.log"

# The same with ThreadSanitizer (cmake/sanitizers.cmake, tests/tsan.supp).
echo "asyncshim: the CPU tier again, built with -fsanitize=thread, in $tsan"
cmake -S . -B "$tsan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DASYNCSHIM_SANITIZE=thread -DASYNCSHIM_FUZZ=OFF >/dev/null
cmake --build "$tsan" --parallel
ctest --test-dir "$tsan" --output-on-failure --parallel "$(nproc)" --timeout "$test_timeout" -LE gpu || status=$?
python3 scripts/skip-reasons.py "$tsan/Testing/Temporary/LastTest.log"
exit "$status"
