#!/usr/bin/env bash
# How often the ordering stress program (tests/gpu/ordering_stress.cu) finds
# corruption in one case, under the shim and natively, on a machine with a
# CUDA GPU: a rare corruption seen once in a run says little until its rate
# is known against a control.
#   scripts/stress-rate.sh [--runs N] [--first-seed S] [--time-limit S] [--arm 'NAME VAR=VALUE...']
#                          [--control 'NAME STRESS_OPTIONS...'] [-- STRESS_ARGS...]
# Runs the case (STRESS_ARGS, default --threads 32 --size-classes 4) up to N
# times in each arm (default 10), the arms taking turns, each run with a seed
# of its own (S, S+1, ..., default 1; the same seeds in every arm: a count
# split over device calls goes on with --first-seed). The arms: `shim`, the
# shim's defaults; the native controls; and each --arm, the shim with those
# settings (e.g. --arm 'in-order-off ASYNCSHIM_IN_ORDER_FREES=off'). A
# control runs without the shim, the case's arguments followed by its own
# options (e.g. --control 'own-pool --program-pool cudaMalloc'); without a
# --control the one control is `native`, every cudaFree made by one thread
# 1 ms later (--deferred-free-ms 1: no block is reused while in use, so
# corruption there is not an allocator's). Stops starting
# runs when the next might not end within --time-limit seconds from the start
# (default 540, for the device's 10 minutes). Builds what it needs in
# ${BUILD_DIR:-build-gpu} (using .deps/ from scripts/prepare-device-deps.sh
# where the Debian -dev packages are missing). Prints a line a run (for a
# failed one, the stress program's account of what it caught) and, last,
# each arm's failed runs; a failed run's output is kept in
# ${OUT:-stress-rate}/ (ARM-seed-N.out and .err). Without a GPU it says so
# and measures nothing. Exit 0 when it ran, 2 on bad usage or a failed build.
set -uo pipefail
runs=10
first_seed=1
time_limit=540
# The arms, in turn: each one's environment (VAR=VALUE, space-separated;
# @shim@ stands for the library), the options it adds to the case's, and
# what the summary calls it.
arms=()
declare -A arm_env arm_options arm_what
add_arm() {  # name, environment, options, description
  [[ -z ${arm_what[$1]:-} ]] || { echo "stress-rate.sh: two arms are named '$1': give each its own name" >&2; exit 2; }
  arms+=("$1")
  arm_env[$1]=$2 arm_options[$1]=$3 arm_what[$1]=$4
}
add_arm shim "LD_PRELOAD=@shim@" "" "the shim's defaults"
controls=()
stress_args=()
while (($# > 0)); do
  case $1 in
    --runs | --first-seed | --time-limit | --arm | --control)
      (($# >= 2)) || { echo "stress-rate.sh: $1 needs a value" >&2; exit 2; }
      case $1 in
        --runs) runs=$2 ;;
        --first-seed) first_seed=$2 ;;
        --time-limit) time_limit=$2 ;;
        --arm)
          [[ $2 =~ ^[A-Za-z0-9_.-]+( +[A-Za-z_][A-Za-z0-9_]*=[^ ]*)+$ ]] || {
            echo "stress-rate.sh: --arm '$2': expected a name, then VAR=VALUE settings, space-separated" >&2
            exit 2
          }
          add_arm "${2%% *}" "LD_PRELOAD=@shim@ ${2#* }" "" "the shim with ${2#* }" ;;
        --control)
          [[ $2 =~ ^[A-Za-z0-9_.-]+( +--[a-z-]+( +[^ -][^ ]*)?)+$ ]] || {
            echo "stress-rate.sh: --control '$2': expected a name, then options of the stress program (--OPTION [VALUE]), space-separated" >&2
            exit 2
          }
          controls+=("$2") ;;
      esac
      shift ;;
    --) shift; stress_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "stress-rate.sh: unknown argument '$1' (--runs N, --first-seed S, --time-limit S, --arm 'NAME VAR=VALUE...'," \
      "--control 'NAME OPTIONS...', -- STRESS_ARGS)" >&2
      exit 2 ;;
  esac
  shift
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "stress-rate.sh: --runs '$runs': expected a whole number above 0" >&2; exit 2; }
[[ $first_seed =~ ^[1-9][0-9]*$ ]] || {
  echo "stress-rate.sh: --first-seed '$first_seed': expected a whole number above 0" >&2
  exit 2
}
[[ $time_limit =~ ^[1-9][0-9]*$ ]] || {
  echo "stress-rate.sh: --time-limit '$time_limit': expected whole seconds above 0" >&2
  exit 2
}
((${#stress_args[@]} > 0)) || stress_args=(--threads 32 --size-classes 4)
((${#controls[@]} > 0)) || controls=("native --deferred-free-ms 1")
for control in "${controls[@]}"; do
  add_arm "${control%% *}" "" "${control#* }" "no shim, ${control#* }"
done
cd "$(dirname "$0")/.." || exit 2
start=$SECONDS
build=${BUILD_DIR:-build-gpu}
configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [[ -d .deps ]]; then configure+=("-DASYNCSHIM_DEPS_DIR=$PWD/.deps" "-DGTEST_ROOT=$PWD/.deps"); fi
if ! { cmake -S . -B "$build" "${configure[@]}" && cmake --build "$build" --target asyncshim ordering_stress; } \
  >/tmp/stress-rate-build.log 2>&1; then
  tail -20 /tmp/stress-rate-build.log
  echo "stress-rate.sh: the build failed (see /tmp/stress-rate-build.log)" >&2
  exit 2
fi
shim=$PWD/$build/shim/libasyncshim.so
stress=$PWD/$build/tests/gpu/ordering_stress
kept=${OUT:-$PWD/stress-rate}
mkdir -p "$kept"
echo "stress-rate: ordering_stress ${stress_args[*]}, up to $runs runs an arm; built in $((SECONDS - start)) s"

declare -A done_runs failed errors
longest=0
for ((seed = first_seed; seed < first_seed + runs; ++seed)); do
  for name in "${arms[@]}"; do
    read -ra settings <<<"${arm_env[$name]//@shim@/$shim}"
    read -ra extra <<<"${arm_options[$name]}"
    if ((SECONDS - start + longest * 3 / 2 + 5 > time_limit)); then
      echo "stress-rate: the time limit of $time_limit s is near: no more runs"
      break 2
    fi
    began=$SECONDS
    out=$kept/$name-seed-$seed
    env ${settings[@]+"${settings[@]}"} timeout 240 "$stress" "${stress_args[@]}" "${extra[@]}" --seed "$seed" \
      >"$out.out" 2>"$out.err"
    status=$?
    ((SECONDS - began > longest)) && longest=$((SECONDS - began))
    line=$(tail -1 "$out.out")
    if [[ $line == SKIP* ]]; then
      rm -f "$out.out" "$out.err"
      echo "stress-rate: nothing measured: $line"
      exit 0
    fi
    bytes=$(grep -o 'corrupted_bytes=[0-9]*' <<<"$line")
    early=$(grep -o 'early_verifies=[0-9]*' <<<"$line")
    overlaps=$(grep -o 'overlaps=[0-9]*' <<<"$line")
    echo "  $name seed $seed: exit $status, ${bytes:-no summary line} ${early} ${overlaps} ($((SECONDS - began)) s)"
    done_runs[$name]=$((${done_runs[$name]:-0} + 1))
    # Which checks caught a failed run: the stress program explains its first few findings.
    ((status == 1)) && grep -E '^ordering_stress: (corrupted|verified early|overlap|allocation [0-9]+: a verify)|^ordering_stress:   (allocation|read at|a verify)' \
      "$out.out" | head -16 | sed 's/^ordering_stress: /      /'
    case $status in
      0) rm -f "$out.out" "$out.err" ;;
      1) failed[$name]=$((${failed[$name]:-0} + 1)) ;;
      *) errors[$name]=$((${errors[$name]:-0} + 1)) ;;
    esac
  done
done
echo "== stress-rate summary: ordering_stress ${stress_args[*]} (exit 1: corruption or an early verify) =="
for name in "${arms[@]}"; do
  echo "  $name (${arm_what[$name]}): exit 1 in ${failed[$name]:-0} of ${done_runs[$name]:-0} runs; other failures (exit 2, a timeout): ${errors[$name]:-0}"
done
