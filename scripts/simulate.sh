#!/usr/bin/env bash
# Runs the seeded workload under the shim on the virtual GPU of the CUDA test
# doubles (no GPU needed): every touch of memory is checked when the simulated
# GPU runs it, and a block touched after it was handed out again is reported.
#
#   scripts/simulate.sh [--build DIR] [--seeds N | --seed S] [--first S]
#                       [--operations N] [--time-limit SEC] [--native]
#                       [--shim FILE] [--expect-uses] [VAR=VALUE ...]
#
#   --build DIR       the build tree (default: build)
#   --seeds N         seeds --first .. --first+N-1 (default 100, from 1)
#   --seed S          one seed
#   --operations N    CUDA operations per seed (default 2000)
#   --time-limit SEC  start no seed after SEC seconds (default: none)
#   --native          without the shim: the native model (cudaFree waits for
#                     the device) must never be flagged
#   --shim FILE       the library to preload (default: the tree's libasyncshim.so)
#   --expect-uses     a positive control: succeed only if some seed finds a use
#                     after reissue and its reproduction line replays it
#   VAR=VALUE         settings every seed gets (they win over each seed's own
#                     choice), e.g. ASYNCSHIM_ORDERING=stream
#
# Prints one line per failing seed, "reproduce: <command>", and a summary:
# seeds run, tasks run on the virtual GPU, tasks run out of submission order,
# uses found. Exit status: 0 clean, 1 a use after reissue (or, with
# --expect-uses, none found), 2 a run that failed otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build
seeds=100
first=1
one_seed=
operations=2000
time_limit=
native=0
shim=
expect_uses=0
settings=()
while [ $# -gt 0 ]; do
  case "$1" in
  --build) build=$2; shift 2 ;;
  --seeds) seeds=$2; shift 2 ;;
  --seed) one_seed=$2; shift 2 ;;
  --first) first=$2; shift 2 ;;
  --operations) operations=$2; shift 2 ;;
  --time-limit) time_limit=$2; shift 2 ;;
  --native) native=1; shift ;;
  --shim) shim=$2; shift 2 ;;
  --expect-uses) expect_uses=1; shift ;;
  *=*) settings+=("$1"); shift ;;
  *) echo "simulate.sh: unknown argument '$1' (see the comment at the top of scripts/simulate.sh)" >&2; exit 2 ;;
  esac
done
for number in "$seeds" "$first" "$operations" ${one_seed:+"$one_seed"} ${time_limit:+"$time_limit"}; do
  case "$number" in
  '' | *[!0-9]*) echo "simulate.sh: '$number' is not a whole number" >&2; exit 2 ;;
  esac
done

workload="$build/tests/simulation/sim_workload"
[ -n "$shim" ] || shim="$build/shim/libasyncshim.so"
if [ ! -x "$workload" ] || { [ "$native" = 0 ] && [ ! -f "$shim" ]; }; then
  echo "simulate.sh: $workload or $shim is missing: build the tree first (cmake --build $build)" >&2
  exit 2
fi
preload=$(realpath "$shim")
[ "$native" = 1 ] && preload=

if [ -n "$one_seed" ]; then
  first=$one_seed
  seeds=1
fi

# One seed: prints the workload's lines; sets $uses and $status.
run_seed() {
  local seed=$1 out
  out=$(LD_PRELOAD=$preload "$workload" --seed "$seed" --operations "$operations" "${settings[@]}" 2>&1)
  status=$?
  uses=$(sed -n 's/.*uses_after_reissue=\([0-9]*\).*/\1/p' <<<"$out" | tail -n 1)
  tasks=$(sed -n 's/.* tasks=\([0-9]*\).*/\1/p' <<<"$out" | tail -n 1)
  reordered=$(sed -n 's/.* out_of_order=\([0-9]*\).*/\1/p' <<<"$out" | tail -n 1)
  output=$out
}

reproduction() {
  local line="scripts/simulate.sh --build $build --seed $1 --operations $operations"
  [ "$native" = 1 ] && line+=" --native"
  [ "$shim" != "$build/shim/libasyncshim.so" ] && line+=" --shim $shim"
  for s in "${settings[@]}"; do line+=" $s"; done
  echo "$line"
}

start=$SECONDS
ran=0
total_tasks=0
total_reordered=0
found=0
failed_seeds=0
broken=0
first_failure=
for ((seed = first; seed < first + seeds; seed++)); do
  if [ -n "$time_limit" ] && [ $((SECONDS - start)) -ge "$time_limit" ]; then break; fi
  run_seed "$seed"
  ran=$((ran + 1))
  total_tasks=$((total_tasks + ${tasks:-0}))
  total_reordered=$((total_reordered + ${reordered:-0}))
  if [ "$seeds" = 1 ] || { [ "$status" != 0 ] && [ "$expect_uses" = 0 ]; }; then printf '%s\n' "$output"; fi
  if [ "$status" = 1 ]; then
    found=$((found + ${uses:-0}))
    failed_seeds=$((failed_seeds + 1))
    if [ -z "$first_failure" ]; then
      first_failure=$seed
      first_uses=${uses:-0}
    fi
    echo "reproduce: $(reproduction "$seed")   # seed $seed: ${uses:-?} use(s) after reissue"
  elif [ "$status" != 0 ]; then
    broken=$((broken + 1))
    echo "simulate.sh: seed $seed: the workload failed (exit $status); reproduce: $(reproduction "$seed")"
  fi
done
echo "simulate.sh: seeds=$ran tasks_run=$total_tasks out_of_order_runs=$total_reordered" \
  "seeds_with_uses=$failed_seeds uses_after_reissue=$found broken_runs=$broken seconds=$((SECONDS - start))"

if [ "$broken" != 0 ]; then exit 2; fi
if [ "$expect_uses" = 1 ]; then
  if [ -z "$first_failure" ]; then
    echo "simulate.sh: expected a use after reissue, found none in $ran seeds"
    exit 1
  fi
  # The failure line must be the reproduction: the same seed finds the same uses.
  run_seed "$first_failure"
  if [ "$status" != 1 ] || [ "${uses:-0}" != "$first_uses" ]; then
    echo "simulate.sh: seed $first_failure did not replay: $first_uses then ${uses:-0} use(s), exit $status"
    exit 1
  fi
  echo "simulate.sh: positive control ok: $failed_seeds of $ran seeds found uses ($found in all);" \
    "seed $first_failure replays with $first_uses"
  exit 0
fi
[ "$found" = 0 ] || exit 1
exit 0
