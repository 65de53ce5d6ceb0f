#!/usr/bin/env bash
# The whole GPU check, on a machine with a CUDA GPU: configures
# and builds (using .deps/ from scripts/prepare-device-deps.sh where the Debian
# -dev packages are missing), runs the CPU tier, the GPU tier, the ordering
# stress in each mode, the leak report and the event log (a known program,
# their costs, a PyTorch ResNet-18 log), compute-sanitizer, the PyTorch same-losses check and
# which streams a ResNet-18 step uses (tests/bench/torch_streams.py), legacy
# IPC between processes (probe scenarios, costs, PyTorch tensor sharing), the
# shared-GPU checks (memory info, neighbours, processes starting together), with
# two GPUs or more the two-GPU tests (with their per-device lines) and a
# two-process torchrun job (TORCHRUN_ROUNDS rounds, default 3), and
# asyncshim-ab on the demo and on a PyTorch loop; keeps full logs (and the A/B
# JSON exports) and prints a short summary last.
#   scripts/gpu-check.sh [--skip-ab] [--only PARTS] [--help]   (logs: $OUT/logs.tgz, else ./gpu-check-logs)
# --skip-ab leaves out the A/B timing runs (several minutes) when only
# correctness is being checked. The whole check takes longer than one device
# call's 10 minutes: --only runs the named parts (comma-separated) after the
# build, e.g. four calls: --only tiers,ipc,sharing; --only stress (about 7
# minutes); --only sanitizer (up to 9 minutes when runs are cut off: each
# gets 90 s, then 60 s without the shim and, memcheck's, 60 s each in three
# bisecting settings); --only
# observe,torch,trace. Parts: tiers (the CPU and
# GPU ctest tiers), breaks (the GPU tier against a shim broken three ways:
# not a library, disabled by an invalid variable, a fence that leaves a
# stream out; every test that runs it must fail, tests/gpu/break_check.py),
# limits (ASYNCSHIM_MEMORY_LIMIT with CuPy and JAX), memory-kinds (the native
# pitch rule and what a pool in host memory gives, measured without the shim),
# ipc (legacy IPC lines and costs), sharing, stress,
# followed (each kind of submission to a non-blocking stream seen, PyTorch's
# lookups leaving followed submissions on, ResNet-18's memory held), observe
# (leak report, event log, lifecycle answers), sanitizer, torch (same
# losses, tensor sharing, streams per step), two-gpu, trace (driver lookups),
# ab. With $OUT the logs are kept elsewhere and packed into $OUT/logs.tgz
# every 10 s or so and at the end, so that a call cut off at its time limit
# still brings back what ran.
set -uo pipefail
skip_ab=0
parts=tiers,breaks,limits,memory-kinds,ipc,sharing,stress,followed,observe,sanitizer,torch,two-gpu,trace,ab
all_parts=$parts
while (($# > 0)); do
  case $1 in
    --skip-ab) skip_ab=1 ;;
    -h | --help) sed -n '2,/^set -uo pipefail/{/^set -uo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    --only)
      parts=${2:-}
      [[ -n $parts ]] || { echo "gpu-check.sh: --only needs parts, comma-separated (parts: $all_parts)" >&2; exit 2; }
      IFS=, read -ra asked <<<"$parts"
      for part in "${asked[@]}"; do
        [[ -n $part && ",$all_parts," == *",$part,"* ]] || {
          echo "gpu-check.sh: --only: unknown part '$part' (parts: $all_parts, comma-separated, no spaces)" >&2
          exit 2
        }
      done
      shift ;;
    *) echo "gpu-check.sh: unknown option '$1' (options: --skip-ab, --only PARTS, --help)" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ ",$parts," == *",$1,"* ]]; }
cd "$(dirname "$0")/.."
# With $OUT (the device machine), the logs end up as one archive,
# $OUT/logs.tgz, made again as the check goes (save_logs): the device brings
# back only a few files of a folder, and nothing made after a time limit.
if [[ -n "${OUT:-}" ]]; then logs=$(mktemp -d /tmp/gpu-check-logs.XXXXXX); else logs=$PWD/gpu-check-logs; fi
saved_at=$SECONDS
save_logs() {
  [[ -n "${OUT:-}" ]] || return 0
  tar czf "$OUT/logs.tgz.part" -C "$logs" . 2>/dev/null && mv -f "$OUT/logs.tgz.part" "$OUT/logs.tgz"
  saved_at=$SECONDS
}
build=${BUILD_DIR:-build-gpu}
mkdir -p "$logs"
summary=()
# Each line goes to the summary and, at once, to the output (so a run that is
# cut short still shows how far it got).
note() {
  summary+=("$*")
  echo "$*"
  ((SECONDS - saved_at < 10)) || save_logs
}

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
note "machine: ${gpu:-no nvidia-smi}; $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc'); $(date -u +%F)"

configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [[ -d .deps ]]; then configure+=("-DASYNCSHIM_DEPS_DIR=$PWD/.deps" "-DGTEST_ROOT=$PWD/.deps"); fi
start=$SECONDS
if ! { cmake -S . -B "$build" "${configure[@]}" && cmake --build "$build" --parallel; } >"$logs/build.log" 2>&1; then
  tail -30 "$logs/build.log"
  echo "== summary =="; printf '%s\n' "${summary[@]}" "build: FAILED (see build.log)"
  exit 1
fi
note "parts: $parts"
note "build: ok in $((SECONDS - start)) s"

run_ctest() {  # label, log name, extra ctest args
  local label=$1 log=$2; shift 2
  ctest --test-dir "$build" --output-on-failure "$@" >"$logs/$log" 2>&1
  local status=$?
  local line
  line=$(grep -E 'tests passed|No tests were found' "$logs/$log" | tail -1)
  local skipped reasons no_device
  skipped=$(grep -c '\*\*\*Skipped' "$logs/$log")
  reasons=$(python3 scripts/skip-reasons.py "$build/Testing/Temporary/LastTest.log" 2>&1)
  echo "$reasons" >"$logs/${log%.log}-skips.txt"
  no_device=$(echo "$reasons" | awk '/no CUDA device/ { n += $2 } END { print n + 0 }')
  note "$label: ${line:-no result} ($skipped skipped, $no_device of them for no CUDA device)"
  while read -r l; do [[ -n $l ]] && note "    ${l#asyncshim: }"; done <<<"$reasons"
  # A machine with a GPU skips nothing for want of one: such a skip is a
  # test that could not reach the device (under the shim, or at all).
  if ((no_device > 0 && ${gpus:-0} > 0)); then
    note "    FAILED: $no_device test(s) skipped for no CUDA device on a machine with $gpus GPU(s)"
    status=1
  fi
  grep -E '\*\*\*Failed|\(Failed\)|Timeout' "$logs/$log" | sed 's/^/    /' | head -20 | while read -r l; do echo "    $l"; done >>"$logs/failures.txt"
  return $status
}
failed=0
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# The GPU tier's own decision, made without the shim (tests/gpu/gpu_devices):
# it must see the devices nvidia-smi sees, or every GPU test would skip.
native_devices=$(env -u LD_PRELOAD "$build/tests/gpu/gpu_devices" 2>&1)
note "devices: nvidia-smi ${gpus:-0}; CUDA runtime without the shim: ${native_devices#gpu_devices: }"
if ((${gpus:-0} > 0)) && [[ $native_devices != "gpu_devices: $gpus" ]]; then
  note "    FAILED: the CUDA runtime does not see the GPUs nvidia-smi lists"
  failed=1
fi
# (second_device also names gpu.sharing.meminfo.second_device, memory info on device 1)
two_gpu_tests='second_device|every_device|peer_access|gpu\.ipc\.cross_device'
if want tiers; then
run_ctest "CPU tier" ctest-cpu.log -LE gpu --parallel 8 || failed=1
# (the ordering stress runs below, once per mode, with its numbers in the
# summary; with two GPUs, so do the two-GPU tests, verbosely)
excluded='torch|gpu\.ordering|gpu\.sharing|gpu\.limit'
[[ ${gpus:-0} -ge 2 ]] && excluded+="|$two_gpu_tests"
run_ctest "GPU tier" ctest-gpu.log -L gpu -E "$excluded" || failed=1
grep -E '^\s*[0-9]+/[0-9]+ Test' "$logs/ctest-gpu.log" | sed -E 's/ \.+/ /' | sed 's/^/    /' >"$logs/gpu-tests.txt"
fi

# A broken shim is a failure, never a skip or a pass: the shim-side GPU tests
# (not the stress runs, which take minutes each) with the shim not loadable
# and disabled; the busy-stream checks with a fence that leaves out the
# stream whose kernel still reads the freed block.
if want breaks; then
  note "breaks (tests/gpu/break_check.py):"
  unbroken='torch|gpu\.ordering|gpu\.sharing|passed_through'  # passed_through: nothing reaches the shim there
  [[ ${gpus:-0} -ge 2 ]] || unbroken+="|$two_gpu_tests"
  python3 tests/gpu/break_check.py "$build" no-load --exclude "$unbroken" >"$logs/break-no-load.log" 2>&1 || failed=1
  note "    $(tail -1 "$logs/break-no-load.log")"
  # (the leak report's check sets every ASYNCSHIM_ variable itself)
  python3 tests/gpu/break_check.py "$build" disabled --exclude "$unbroken|leak_report_and_event_log" \
    >"$logs/break-disabled.log" 2>&1 || failed=1
  note "    $(tail -1 "$logs/break-disabled.log")"
  python3 tests/gpu/break_check.py "$build" fence \
    --regex '^gpu\.shim\.busy_stream(_in_order_off|_reuse_cache)?$' >"$logs/break-fence.log" 2>&1 || failed=1
  while read -r l; do note "    $l"; done < <(grep -E 'break_check: fence' "$logs/break-fence.log")
fi

# The memory limit on a shared GPU: two processes at 40%, CuPy's memory info,
# JAX's preallocation inside the limit (each takes much of the device: alone).
if want limits; then
  note "memory limit (tests/gpu/limit_check.py):"
  run_ctest "memory limit" ctest-limits.log -V -L gpu -R '^gpu\.limit\.' || failed=1
  while read -r l; do note "    $l"; done < <(grep -E '^[0-9]+: (neighbour|holder|jax|meminfo|NVML|FAIL)|Test +#[0-9]+: gpu\.limit' \
    "$logs/ctest-limits.log" | sed -E 's/ \.+/ /')
fi

# Pitched and host-pool memory, natively (tests/gpu/pitch_rule_probe.cu,
# host_pool_probe.cu): findings for serving those kinds from pools; each
# probe's whole output is in the logs.
if want memory-kinds; then
  for probe in pitch_rule_probe host_pool_probe; do
    exe=$PWD/$build/tests/gpu/$probe
    [[ -x $exe ]] || { note "$probe: not built"; failed=1; continue; }
    timeout 300 "$exe" >"$logs/$probe.out" 2>&1
    status=$?
    [[ $status -eq 0 ]] || failed=1
    note "$probe (exit $status): $(tail -1 "$logs/$probe.out")"
    while read -r l; do note "    $l"; done < <(grep -E '^(MISS|FAIL|DIFFERS|beyond|pair|SKIP|steps)' "$logs/$probe.out" | head -80)
  done
fi

shim=$PWD/$build/shim/libasyncshim.so
# as_arm native|shim COMMAND...: COMMAND as it is, or with the shim preloaded.
as_arm() {
  local arm=$1
  shift
  if [[ $arm == shim ]]; then env LD_PRELOAD="$shim" "$@"; else "$@"; fi
}

# Legacy IPC between processes (tests/shim/ipc_probe.cpp: simpleIPC-style
# sharing, open/close semantics, the exporter freeing or exiting, an importer
# without the shim, of another user, in another PID namespace), each natively
# and under the shim, from the GPU tier; then what it costs (tests/gpu/ipc_costs.cu).
want ipc && note "legacy IPC (each scenario natively and under the shim, from the GPU tier):"
want ipc && want tiers && while read -r l; do note "    $l"; done < <(grep -E 'gpu\.ipc\.' "$logs/gpu-tests.txt" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: //; s/ +/ /g')
costs=$PWD/$build/tests/gpu/ipc_costs
if want ipc && [[ -x $costs ]]; then
  "$costs" release >"$logs/ipc-costs-release.txt" 2>&1
  while read -r l; do note "    $l"; done <"$logs/ipc-costs-release.txt"
  for arm in native shim; do
    as_arm $arm timeout 120 "$costs" latency >"$logs/ipc-costs-latency-$arm.txt" 2>&1
    while read -r l; do note "    $arm: $l"; done < <(grep -v '^asyncshim' "$logs/ipc-costs-latency-$arm.txt")
  done
fi

# A shared GPU (tests/gpu/sharing_check.py): natively, under the shim's
# defaults, and for the record under its former defaults (half-free, no idle
# release; or BEFORE_LIBRARY, an earlier build, with its own defaults), which
# may fail. Every line goes to the summary.
sharing_checks=(meminfo torch-meminfo idle-neighbour turns together-8 together-32)
before=(--before)
[[ -n ${BEFORE_LIBRARY:-} ]] && before+=(--before-library "$(readlink -f "$BEFORE_LIBRARY")")
want sharing && note "sharing a GPU (native | shim defaults | for the record: before = ${BEFORE_LIBRARY:-ASYNCSHIM_INITIAL_POOL_SIZE=half-free ASYNCSHIM_IDLE_RELEASE=off}):"
want sharing && for probe in sharing_probe sharing_probe_static; do
  checks=("${sharing_checks[@]}")
  [[ $probe == sharing_probe_static ]] && checks=(meminfo)
  out=$(timeout 900 python3 tests/gpu/sharing_check.py --shim "$shim" \
    --probe "$PWD/$build/tests/gpu/$probe" "${before[@]}" "${checks[@]}" 2>&1)
  status=$?
  echo "$out" >"$logs/sharing-$probe.log"
  [[ $status -eq 0 ]] || failed=1
  while read -r l; do note "    $probe: $l"; done < <(echo "$out" | grep -E '^(sharing|SKIP)')
  note "    $probe: exit $status"
done

# The ordering stress program (tests/gpu/ordering_stress.cu) in each mode:
# device and sync must see no corrupted byte and no overlap; stream mode, the
# positive control, must see both.
stress=$PWD/$build/tests/gpu/ordering_stress
# stress_run NAME LABEL [VAR=VALUE...] -- ARGS...: the stress program with
# those settings and arguments (its output in the logs as NAME.out and
# NAME.err); notes LABEL with its exit status and summary line, and returns
# its status. With the shim preloaded, its statistics (NAME.json unless
# given) must show pool-served allocations, else the status is 3: a shim
# that did not load or was disabled would otherwise pass natively.
stress_run() {
  local name=$1 label=$2 settings=() line status stats=""
  shift 2
  while [[ $1 != -- ]]; do
    settings+=("$1")
    [[ $1 == ASYNCSHIM_STATS_FILE=* ]] && stats=${1#ASYNCSHIM_STATS_FILE=}
    shift
  done
  shift
  local preloaded=0
  [[ " ${settings[*]} " == *" LD_PRELOAD="* ]] && preloaded=1
  if ((preloaded)) && [[ -z $stats ]]; then
    stats=$logs/$name.json
    settings+=("ASYNCSHIM_STATS_FILE=$stats")
  fi
  [[ -n $stats ]] && rm -f "$stats"
  line=$(env "${settings[@]}" timeout 240 "$stress" "$@" 2>"$logs/$name.err" | tee "$logs/$name.out" | tail -1)
  status=$?
  note "    $label (exit $status): $line"
  if ((preloaded)) && ! python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["devices"][0]["allocations"] == 0)' \
    "$stats" 2>/dev/null; then
    note "    $label: FAILED: no statistics with pool-served allocations ($stats): the shim was not at work"
    return 3
  fi
  return $status
}
# The statistics file's figure for one stress run, as a line of the summary.
note_stats() {  # file, then a Python expression of `d` (the first device's statistics)
  note "    $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["devices"][0]; print(eval(sys.argv[2]))' \
    "$1" "$2" 2>&1)"
}
if want stress && [[ -x $stress ]]; then
  note "ordering stress (16 threads, non-blocking streams + legacy, cross-thread frees):"
  stress_run stress-device device LD_PRELOAD="$shim" ASYNCSHIM_ORDERING=device -- || failed=1
  # (sync ordering synchronizes the device at each free: 400,000 operations
  # take it about 70 s, the default million 170 s)
  stress_run stress-sync sync LD_PRELOAD="$shim" ASYNCSHIM_ORDERING=sync -- --operations 400000 || failed=1
  # The positive control: stream ordering must show corruption and overlaps (exit 1).
  stress_run stress-stream "stream (must corrupt)" LD_PRELOAD="$shim" ASYNCSHIM_ORDERING=stream --
  status=$?
  if ((status != 1)) || ! grep -qE 'corrupted_bytes=[1-9].* overlaps=[1-9]' "$logs/stress-stream.out"; then
    note "    FAILED: stream ordering showed no corruption or no overlap (exit $status): the stress program could not see one"
    failed=1
  fi
  # Few sizes: most allocations can reuse a block freed a moment before, from
  # the reuse cache, or at 32 threads and 4 sizes from the pool.
  stress_run stress-classes "device, reuse cache on, 16 sizes" LD_PRELOAD="$shim" ASYNCSHIM_REUSE_CACHE=1GiB \
    ASYNCSHIM_STATS_FILE="$logs/stress-classes.json" -- --size-classes 16 || failed=1
  note_stats "$logs/stress-classes.json" \
    '"reuse cache: %d hits, %d misses, peak %d MiB held" % (d["reuse_cache"]["hits"], d["reuse_cache"]["misses"], d["reuse_cache"]["peak_held_bytes"] >> 20)'
  stress_run stress-few-sizes "device, 32 threads, 4 sizes" LD_PRELOAD="$shim" -- --size-classes 4 --threads 32 ||
    failed=1
  # The controls for that case: natively with cudaFree made every 5 ms by one
  # thread (no reuse while in use; corruption there is not an allocator's);
  # natively with no cudaFree at all, the program's own pool allocating and
  # freeing on the legacy stream as the shim does, a block handed out again
  # only after a device synchronization (for the record: an early verify
  # there is the driver's); and under the shim with no event recorded twice
  # (the control for event recycling, as in the GPU tier).
  stress_run stress-deferred "native, frees deferred 5 ms, 32 threads, 4 sizes" -- \
    --size-classes 4 --threads 32 --deferred-free-ms 5 --operations 400000 || failed=1
  stress_run stress-program-pool "native, the program's own pool on the legacy stream, 32 threads, 4 sizes" -- \
    --size-classes 4 --threads 32 --program-pool cudaMallocAsync --operations 400000
  stress_run stress-fresh-events "device, 32 threads, 4 sizes, fresh events" LD_PRELOAD="$shim" -- \
    --size-classes 4 --threads 32 --fresh-events --operations 400000 || failed=1
  stress_run stress-backlog "device, free backlog 64 MiB" LD_PRELOAD="$shim" ASYNCSHIM_FREE_BACKLOG=64MiB \
    ASYNCSHIM_STATS_FILE="$logs/stress-backlog.json" -- --operations 400000 || failed=1
  note_stats "$logs/stress-backlog.json" \
    '"free backlog: %d frees over the limit, %d waited (%.1f ms), peak %d MiB waiting" % (d["free_backlog"]["frees_over_limit"], d["free_backlog"]["frees_waited"], d["free_backlog"]["waited_ns"] / 1e6, d["free_backlog"]["peak_bytes"] >> 20)'
  stress_run stress-stream-blocking "stream, blocking streams only" LD_PRELOAD="$shim" ASYNCSHIM_ORDERING=stream -- \
    --blocking-streams --operations 400000 || failed=1
  in_order='"in order: %d of %d frees" % (d["in_order_frees"], d["frees"])'
  # Device ordering with no non-blocking stream: frees go in the legacy
  # stream's order; then every thread switches to a non-blocking stream;
  # both also with the reuse cache on (blocks freed in order kept for reuse).
  for cache in 0 1GiB; do
    for late in "" --late-non-blocking; do
      name=stress-in-order${late:+-late}-cache-$cache
      stress_run "$name" "device, blocking streams${late:+, then non-blocking ones}, reuse cache $cache" \
        LD_PRELOAD="$shim" ASYNCSHIM_REUSE_CACHE=$cache ASYNCSHIM_STATS_FILE="$logs/$name.json" -- \
        --blocking-streams $late --size-classes 4 --operations 400000 || failed=1
      note_stats "$logs/$name.json" "$in_order"
    done
  done
  # Device ordering with blocking streams and 4 shared non-blocking side
  # streams: frees go in the legacy stream's order whenever none of the side
  # streams has work in progress.
  for cache in 0 1GiB; do
    name=stress-idle-streams-cache-$cache
    stress_run "$name" "device, blocking streams and 4 side streams, reuse cache $cache" LD_PRELOAD="$shim" \
      ASYNCSHIM_REUSE_CACHE=$cache ASYNCSHIM_STATS_FILE="$logs/$name.json" -- \
      --blocking-streams --side-streams 4 --size-classes 4 --operations 400000 || failed=1
    note_stats "$logs/$name.json" "$in_order"
  done
  # (These controls and the runs below them are for the record: their exit,
  # in their line, does not fail the check.)
  # The default configuration's open corruption (a program's wait that did
  # not hold, a verify on the legacy stream reading a buffer before its fill
  # ran; about once in one or two runs of a million operations): natively at
  # the same length with every cudaFree made by one thread every 1 ms (no
  # block reused while in use, deep queues as under the shim: corruption
  # there is the driver's), and under the shim with its allocations on the
  # per-thread default stream instead of the legacy one (its only call there
  # is then the fence's record), with kernel launches only (no host
  # functions, copies or graph launches), and with 32 hardware queues
  # (CUDA_DEVICE_MAX_CONNECTIONS=32: with 16 streams and more on the default
  # 8, streams share queues).
  stress_run stress-native-deferred-1ms "native, frees deferred 1 ms" -- --deferred-free-ms 1
  stress_run stress-device-per-thread "device, per thread" LD_PRELOAD="$shim" ASYNCSHIM_STREAM=per-thread --
  stress_run stress-device-kernels-only "device, kernels only" LD_PRELOAD="$shim" -- --kernels-only
  stress_run stress-device-connections-32 "device, connections 32" LD_PRELOAD="$shim" \
    CUDA_DEVICE_MAX_CONNECTIONS=32 --
  # Does a program's cudaStreamWaitEvent hold while other threads record
  # events on, make waits in and allocate from a pool on the same streams, as
  # the shim does, with the program's event recorded again right after?
  # Natively; the noise's waits alone could supply a lost dependency, so also
  # without them. The control without the program's wait must see early checks.
  ewr=$PWD/$build/tests/gpu/event_wait_race
  for target in legacy shared own; do
    for noise in record,alloc record,wait,alloc; do
      line=$(timeout 120 "$ewr" --target $target --noise $noise --rerecord --producers 16 --noise-threads 4 \
        --iterations 40000 2>&1)
      status=$?
      note "    native (exit $status): $(tr '\n' ' ' <<<"$line")"
    done
  done
  line=$(timeout 60 "$ewr" --target legacy --noise none --no-wait --producers 4 --iterations 2000 2>&1)
  note "    native, the control without the wait (exit $?, early checks expected): $(tr '\n' ' ' <<<"$line")"
  # Does the legacy stream wait for work pending on a destroyed blocking
  # stream? (The shim follows only non-blocking streams; a temporary blocking
  # stream destroyed with work pending relies on it.)
  for arm in native shim; do
    note "    $arm: $(as_arm $arm timeout 60 "$PWD/$build/tests/gpu/shim_gpu_probe" destroyed-stream 2>&1 |
      grep -v '^asyncshim' | tr '\n' ' ')"
  done
  stress_run stress-native "native cudaMalloc" -- --operations 200000
fi

# The leak report and the event log: a program with known leaks (also in the
# GPU tier), what each costs on a 4 KiB cudaMalloc/cudaFree pair, and the event
# log of an uncached PyTorch ResNet-18 run (kept in the logs, for replaying).
leak_probe=$PWD/$build/tests/gpu/lifecycle_probe
if want observe && [[ -x $leak_probe ]]; then
  note "leak report and event log:"
  note "    $(python3 tests/gpu/check_gpu_leaks.py "$shim" "$leak_probe" scripts/asyncshim-replay \
    "$PWD/$build/bin/asyncshim-replayer" 2>&1 | tail -1)"
  pairs=$PWD/$build/tests/bench/alloc_bench
  if [[ -x $pairs ]]; then
    for round in 1 2; do
      for arm in plain leak-report leak-stacks event-log; do
        extra=()
        case $arm in
          leak-report) extra=(ASYNCSHIM_LEAK_REPORT=1) ;;
          leak-stacks) extra=(ASYNCSHIM_LEAK_REPORT=1 ASYNCSHIM_LEAK_STACK_DEPTH=8) ;;
          event-log) extra=("ASYNCSHIM_EVENT_LOG=$logs/pairs-events.csv") ;;
        esac
        line=$(env LD_PRELOAD="$shim" ASYNCSHIM_INITIAL_POOL_SIZE=1GiB "${extra[@]}" timeout 120 "$pairs" pairs \
          --api runtime --size 4K --iterations 50000 2>/dev/null | grep -oE 'median [0-9.]+ us' | head -1)
        note "    round $round, $arm: ${line:-no result}"
      done
    done
    rm -f "$logs/pairs-events.csv"
  fi
  if python3 -c 'import torch' 2>/dev/null; then
    env LD_PRELOAD="$shim" PYTORCH_NO_CUDA_MEMORY_CACHING=1 ASYNCSHIM_EVENT_LOG="$logs/resnet18-events.csv" \
      timeout 300 python3 tests/bench/torch_bench.py --model resnet18 --steps 5 --warmup 2 >"$logs/resnet18-events.out" 2>&1
    note "    ResNet-18 event log (exit $?): $(($(wc -l <"$logs/resnet18-events.csv" 2>/dev/null || echo 1) - 1)) events, in resnet18-events.csv"
    # Replayed natively, on the raw pool and under the shim's defaults.
    python3 scripts/asyncshim-replay "$logs/resnet18-events.csv" --shim "$shim" \
      --replayer "$PWD/$build/bin/asyncshim-replayer" --export-json "$logs/replay-resnet18.json" \
      >"$logs/replay-resnet18.txt" 2>&1
    note "    asyncshim-replay of it (exit $?):"
    while read -r l; do note "      $l"; done < <(grep -E '^\||events from' "$logs/replay-resnet18.txt")
  fi
fi

# The lifecycle probe's native answers, kept for the record (the GPU tier
# compared them with the shim's).
probe=$PWD/$build/tests/gpu/lifecycle_probe
if want observe && [[ -x $probe ]]; then
  for sub in capture-global-same-thread capture-global-other-thread capture-thread-local-other-thread \
      capture-relaxed-same-thread capture-legacy-blocking capture-per-thread-stream reset oom last-error fork \
      fork-under-load exit-live exit-static-destructor exit-atexit exit-after-reset exit-after-reset-destructor; do
    echo "== $sub"; "$probe" "$sub" 2>&1; echo "exit $?"
  done >"$logs/lifecycle-native.txt"
fi

# compute-sanitizer (memcheck, racecheck) on GPU programs under the shim.
if want sanitizer && command -v compute-sanitizer >/dev/null; then
  note "compute-sanitizer under the shim:"
  # run_sanitizer LIMIT LOG COMMAND...: runs COMMAND in a session of its own
  # for at most LIMIT seconds, output to LOG. Cut off, it returns 124, as
  # timeout does, after writing to LOG.stacks what each process of the
  # session was doing (its threads' kernel wait channels and, with gdb,
  # their call stacks: compute-sanitizer's own as well as the program's;
  # without gdb, scripts/thread-stacks.py's: backtraces from the program's
  # threads through libthread_stacks.so, preloaded with
  # THREAD_STACKS_FILE=LOG.threads, and the scanned stacks of the threads
  # that block signals, such as the shim's own); then the whole session
  # is killed and waited for, so that nothing of it goes on using the GPU
  # during the next parts.
  cpu_ticks() {  # a thread's (/proc/PID/task/TID) user and system time so far, in clock ticks
    local stat
    stat=$(<"$1/stat") 2>/dev/null || { echo 0; return; }
    read -ra stat <<<"${stat##*) }"  # the fields after the command name: state is the first
    echo $((stat[11] + stat[12]))
  }
  run_sanitizer() {
    local limit=$1 log=$2; shift 2
    setsid "$@" >"$log" 2>&1 &
    local pid=$! waited=0
    while kill -0 "$pid" 2>/dev/null && ((waited < limit)); do
      sleep 1
      ((waited += 1))
    done
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      return
    fi
    local member task
    # The CPU time each thread takes in 2 s: a thread that spins takes
    # nearly all of it, one that only wakes now and then nearly none.
    local -A ticks_before
    for member in $(pgrep -s "$pid"); do
      for task in /proc/"$member"/task/*; do
        ticks_before[$task]=$(cpu_ticks "$task")
      done
    done
    sleep 2
    for member in $(pgrep -s "$pid"); do
      {
        echo "== process $member: $(tr '\0' ' ' <"/proc/$member/cmdline" 2>/dev/null)"
        for task in /proc/"$member"/task/*; do
          local spent=$(($(cpu_ticks "$task") - ${ticks_before[$task]:-0}))
          echo "thread ${task##*/}: $(cat "$task/comm" 2>/dev/null) wchan $(cat "$task/wchan" 2>/dev/null)," \
            "$((spent * 1000 / $(getconf CLK_TCK))) ms of CPU in 2 s"
        done
        if command -v gdb >/dev/null; then
          timeout 30 gdb -p "$member" -batch -ex "thread apply all bt" 2>&1
        else
          timeout 60 python3 scripts/thread-stacks.py "$member" "$log.threads" 2>&1
        fi
      } >>"$log.stacks"
    done
    kill -KILL -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    for ((waited = 0; waited < 30; waited++)); do
      pgrep -s "$pid" >/dev/null || break
      sleep 1
    done
    pgrep -s "$pid" >/dev/null && echo "still running after being killed: $(pgrep -s "$pid" | tr '\n' ' ')" >>"$log.stacks"
    return 124
  }
  thread_stacks=$PWD/$build/tests/tools/libthread_stacks.so
  [[ -f $thread_stacks ]] || thread_stacks=
  # sanitize_with_shim LIMIT TOOL LOG [VAR=VALUE...] PROGRAM ARGS...: the
  # program under TOOL with the shim (and the stack helper) preloaded.
  sanitize_with_shim() {
    local limit=$1 tool=$2 log=$3; shift 3
    run_sanitizer "$limit" "$log" compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 \
      env LD_PRELOAD="$shim${thread_stacks:+:$thread_stacks}" THREAD_STACKS_FILE="$log.threads" \
      ASYNCSHIM_INITIAL_POOL_SIZE=256MiB "$@"
  }
  sanitizer_summary() {  # log: its error summary lines, counted
    grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$1" | sort | uniq -c | tr -s ' ' | tr '\n' ';'
  }
  sanitize() {  # tool, name, program and arguments
    local tool=$1 name=$2; shift 2
    local log=$logs/sanitizer-$tool-$name.log
    sanitize_with_shim 90 "$tool" "$log" "$@"
    local status=$?
    [[ $status -eq 0 ]] || failed=1
    note "    $tool $name (exit $status): $(sanitizer_summary "$log")"
    if ((status == 124)); then
      # Cut off: is it the shim (a hang under the sanitizer) or the program
      # being that slow under it? The same without the shim, for comparison
      # (for 60 s: whether it ends at all well within the time), and for
      # memcheck three runs under the shim that leave out one of its own
      # mechanisms each: the idle release (the shim's thread), in-order
      # frees, and any trim of the pool (a release threshold of the whole
      # device).
      local started=$SECONDS
      run_sanitizer 60 "$logs/sanitizer-$tool-$name-native.log" compute-sanitizer --tool "$tool" \
        --target-processes all --error-exitcode 9 "$@"
      status=$?
      note "    $tool $name without the shim, for comparison (exit $status after $((SECONDS - started)) s): $(sanitizer_summary "$logs/sanitizer-$tool-$name-native.log")"
      local bisects=() setting
      [[ $tool == memcheck ]] && bisects=(ASYNCSHIM_IDLE_RELEASE=off ASYNCSHIM_IN_ORDER_FREES=off
        ASYNCSHIM_RELEASE_THRESHOLD=100%)
      for setting in "${bisects[@]}"; do
        started=$SECONDS
        log=$logs/sanitizer-$tool-$name-${setting%%=*}.log
        sanitize_with_shim 60 "$tool" "$log" "$setting" "$@"
        status=$?
        note "    $tool $name with $setting (exit $status after $((SECONDS - started)) s): $(sanitizer_summary "$log")"
      done
      # Which thread was running, and where each one was.
      for stacks in "$logs/sanitizer-$tool-$name"*.log.stacks; do
        [[ -f $stacks ]] || continue
        local running
        running=$(grep -E 'wchan 0,' "$stacks" | cut -d' ' -f3,6- | sort | uniq -c | tr -s ' ' | tr '\n' ';')
        note "      $(basename "$stacks"): threads running: ${running:-none}"
      done
    fi
  }
  # racecheck instruments every shared-memory access and is far slower: a
  # much smaller stress run for it (4 threads of 2,000 operations did not
  # end within 60 s even without the shim).
  sanitize memcheck kernels "$PWD/$build/tests/gpu/shim_gpu_probe" kernels
  sanitize memcheck threads "$PWD/$build/tests/gpu/shim_gpu_probe" threads
  [[ -x $stress ]] && sanitize memcheck stress "$stress" --threads 4 --operations 20000
  sanitize racecheck kernels "$PWD/$build/tests/gpu/shim_gpu_probe" kernels
  [[ -x $stress ]] && sanitize racecheck stress "$stress" --threads 2 --operations 500
fi
if want torch; then
torch_out=$(python3 tests/gpu/torch_same_losses.py --shim "$shim" --steps 60 2>&1)
torch_status=$?
echo "$torch_out" >"$logs/torch.log"
[[ $torch_status -eq 0 ]] || failed=1
note "PyTorch same losses (exit $torch_status):"
while read -r l; do note "    $l"; done < <(echo "$torch_out" | tail -4)

# PyTorch tensors shared by torch.multiprocessing (legacy IPC), natively and
# under the shim, with the caching allocator and without.
ipc_out=$(python3 tests/gpu/torch_ipc.py --shim "$shim" --timeout 60 --log-dir "$logs" 2>&1)
ipc_status=$?
echo "$ipc_out" >"$logs/torch-ipc.log"
[[ $ipc_status -eq 0 ]] || failed=1
note "PyTorch tensor sharing, torch.multiprocessing (exit $ipc_status):"
while read -r l; do note "    $l"; done < <(echo "$ipc_out" | grep -E '^(torch ipc|SKIP)')
# Which streams a ResNet-18 step puts work on (docs/design.md#followed-submissions),
# uncached, natively and under the shim: what it counts is the program's.
for arm in native shim; do
  as_arm $arm env PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 180 python3 tests/bench/torch_streams.py --model resnet18 \
    >"$logs/torch-streams-$arm.log" 2>&1
  note "ResNet-18 work per stream, $arm (exit $?):"
  while read -r l; do note "    $l"; done < <(grep -E '^(torch_streams: stream|SKIP)' "$logs/torch-streams-$arm.log" | head -12)
done
fi

# Followed submissions (docs/design.md#followed-submissions): each kind of work on a
# non-blocking stream is seen (both probe builds); PyTorch's lookups leave
# them on; ResNet-18 uncached under the shim, and its pool's high-water mark
# against PyTorch's own cache.
if want followed; then
  for probe in followed_submissions_probe followed_submissions_probe_ptds; do
    exe=$PWD/$build/tests/gpu/$probe
    [[ -x $exe ]] || { note "$probe: not built"; failed=1; continue; }
    LD_PRELOAD="$shim" ASYNCSHIM_LOG_LEVEL=debug ASYNCSHIM_LOG_FILE="$logs/$probe.log" \
      ASYNCSHIM_STATS_FILE="$logs/$probe.json" "$exe" >"$logs/$probe.out" 2>&1
    status=$?
    [[ $status -eq 0 ]] || failed=1
    note "$probe (exit $status): $(tail -1 "$logs/$probe.out")"
    while read -r l; do note "    $l"; done < <(grep -E '^(WRONG|FAIL)' "$logs/$probe.out")
    note_stats "$logs/$probe.json" '"frees %d, in order %d" % (d["frees"], d["in_order_frees"])'
    stopped=$(grep -h -E 'looked up the driver function|CUDA runtime puts on streams' "$logs/$probe.log" 2>/dev/null | sed -E -e 's/.*function ([^ ]+ \([^)]*\)).*/\1/' -e 's/.*runtime puts on streams (\([^)]*\)).*/the runtime check \1/' | sort -u | tr '\n' ';')
    note "    followed submissions ended by: ${stopped:-nothing}"
  done
  if python3 -c 'import torch' 2>/dev/null; then
    for model in resnet18 transformer mlp; do
      LD_PRELOAD="$shim" ASYNCSHIM_INITIAL_POOL_SIZE=0 ASYNCSHIM_LOG_LEVEL=info ASYNCSHIM_LOG_FILE="$logs/followed-$model.log" \
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 ASYNCSHIM_STATS_FILE="$logs/followed-$model.json" \
        timeout 240 python3 tests/bench/torch_bench.py --model "$model" --steps 20 --warmup 5 --purpose memory \
        >"$logs/followed-$model.out" 2>&1
      status=$?
      timeout 240 python3 tests/bench/torch_bench.py --model "$model" --steps 20 --warmup 5 --purpose memory \
        >"$logs/followed-$model-cached.out" 2>&1
      held=$(python3 - "$logs/followed-$model.out" "$logs/followed-$model-cached.out" <<'PY' 2>/dev/null
import json, sys
def last(path):
    for line in reversed(open(path).read().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            pass
shim, cached = last(sys.argv[1]), last(sys.argv[2])
a, b = shim["reserved_high_water_bytes"], cached["reserved_high_water_bytes"]
print(f"pool high-water {a >> 20} MiB, PyTorch cache {b >> 20} MiB ({a / b:.2f}x)")
PY
)
      stopped=$(grep -h -E 'looked up the driver function|CUDA runtime puts on streams' "$logs/followed-$model.log" 2>/dev/null | sed -E -e 's/.*function ([^ ]+ \([^)]*\)).*/\1/' -e 's/.*runtime puts on streams (\([^)]*\)).*/the runtime check \1/' | head -1)
      note "$model under the shim, uncached (exit $status): ${held:-no figures}; followed submissions ended: ${stopped:-no}"
      note_stats "$logs/followed-$model.json" '"frees %d, in order %d" % (d["frees"], d["in_order_frees"])'
    done
  fi
fi

# With two GPUs or more: the two-GPU tests, verbosely, for their per-device
# lines; then a two-process PyTorch job (torchrun, NCCL all-reduce
# each step) without and with the shim, in alternating rounds (the machine
# drifts), each process under the shim writing its own statistics file.
if want two-gpu && [[ ${gpus:-0} -ge 2 ]]; then
  ctest --test-dir "$build" -V -L gpu -R "$two_gpu_tests" >"$logs/two-gpu-tests.log" 2>&1 || failed=1
  grep -E '\*\*\*Failed|\(Failed\)|Timeout' "$logs/two-gpu-tests.log" | sed 's/^/    /' >>"$logs/failures.txt"
  note "two-GPU tests ($gpus GPUs):"
  while read -r l; do note "    $l"; done < <(grep -E 'Test +#.*(Passed|Failed|Skipped|\*\*\*)' "$logs/two-gpu-tests.log" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: //; s/ \.+ */ /')
  while read -r l; do note "    $l"; done < <(grep -E ': device [0-9]+: free' "$logs/two-gpu-tests.log" | sed -E 's/^[0-9]+: //')
  while read -r l; do note "    $l"; done < <(grep -E ': sharing: meminfo on device [0-9]+' "$logs/two-gpu-tests.log" | sed -E 's/^[0-9]+: //')
  note "    peer-access data checks: $(grep -c ': data ok' "$logs/two-gpu-tests.log") 'data ok', $(grep -c 'words wrong' "$logs/two-gpu-tests.log") 'words wrong'"
fi
if want two-gpu && [[ ${gpus:-0} -ge 2 ]] && python3 -c 'import torch' 2>/dev/null; then
  rounds=${TORCHRUN_ROUNDS:-3}
  note "torchrun, 2 processes, NCCL all-reduce, PYTORCH_NO_CUDA_MEMORY_CACHING=1, $rounds rounds:"
  for round in $(seq "$rounds"); do
    for arm in native shim; do
      preload=(); [[ $arm == shim ]] && preload=("LD_PRELOAD=$shim" "ASYNCSHIM_INITIAL_POOL_SIZE=0" "ASYNCSHIM_STATS_FILE=$logs/torchrun-stats-round$round-%p.json")
      out=$(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${preload[@]}" timeout 300 \
        torchrun --nproc_per_node=2 --standalone tests/gpu/torch_allreduce.py --steps 100 2>"$logs/torchrun-$arm-$round.err")
      status=$?
      [[ $status -eq 0 ]] || failed=1
      while read -r l; do note "    round $round $arm (exit $status): $l"; done < <(echo "$out" | grep -E '^rank|SKIP')
    done
  done
  for stats in "$logs"/torchrun-stats-*.json; do
    [[ -e $stats ]] || continue
    note "    $(basename "$stats"): $(python3 - "$stats" <<'PY' 2>&1
import json, sys
record = json.load(open(sys.argv[1]))
print("; ".join(f"device {d['device']}: {d['allocations']} allocations, {d['frees']} frees, "
                f"{d['live_allocations']} live, {d['passed_through']['total']} passed through"
                for d in record["devices"]))
PY
)"
  done
fi

# Which driver entry points a static and a shared runtime fetch through
# cuGetProcAddress, and which of them the shim replaced (trace log).
want trace && for probe in shim_gpu_probe_static shim_gpu_probe; do
  exe=$PWD/$build/tests/gpu/$probe
  [[ -x $exe ]] || continue
  LD_PRELOAD=$PWD/$build/shim/libasyncshim.so ASYNCSHIM_LOG_LEVEL=trace ASYNCSHIM_INITIAL_POOL_SIZE=0 \
    ASYNCSHIM_LOG_FILE="$logs/trace-$probe.log" ASYNCSHIM_STATS_FILE="$logs/stats-$probe.json" "$exe" first-call >/dev/null 2>&1
  lookups=$(grep -c 'cuGetProcAddress' "$logs/trace-$probe.log" 2>/dev/null)
  replaced=$(grep 'replaced by asyncshim' "$logs/trace-$probe.log" 2>/dev/null | sed -E 's/.*(cuGetProcAddress[_v2]*\("[^"]*", version [0-9]+, flags [0-9]+\)).*/\1/' | sort -u | tr '\n' ' ')
  by_entry=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["devices"][0]["allocations_by_entry_point"])' "$logs/stats-$probe.json" 2>/dev/null)
  note "$probe: ${lookups:-0} driver lookups; replaced: ${replaced:-none}; allocations by entry point: ${by_entry:-none}"
done

# The A/B wrapper on the bundled demo and on an unmodified PyTorch loop with
# its caching allocator off; the last lines of each (the summary) go to the summary.
ab=$PWD/$build/bin/asyncshim-ab
ab_summary() {  # name, then the asyncshim-ab arguments
  local name=$1; shift
  local text status
  text=$("$ab" --export-json "$logs/ab-$name.json" "$@" 2>&1)
  status=$?
  echo "$text" >"$logs/ab-$name.log"
  [[ $status -eq 0 ]] || failed=1
  note "asyncshim-ab $name (exit $status):"
  while read -r l; do note "    $l"; done < <(echo "$text" | grep -E 'Time \(mean|GPU|ran$|times (faster|slower)|Mann-Whitney|bootstrap')
}
demo=$PWD/$build/tests/demo/alloc_per_request
want ab || skip_ab=1
if [[ $skip_ab -eq 1 ]]; then
  note "asyncshim-ab runs: skipped (--skip-ab or --only)"
elif [[ -x $demo ]]; then
  ASYNCSHIM_INITIAL_POOL_SIZE=1GiB ab_summary demo -- "$demo" 3000
fi
if [[ $skip_ab -eq 0 ]] && python3 -c 'import torch' 2>/dev/null; then
  # Each run is several seconds: 6 runs per arm bound the device time.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 ASYNCSHIM_INITIAL_POOL_SIZE=4GiB ab_summary torch --runs 6 -- python3 tests/demo/torch_training_loop.py
fi
note "library: $(tests/shim/check_library.sh "$shim" "$build/shim/exports.map" | tr '\n' ' ')"

if [[ -e "$logs/gpu-tests.txt" ]]; then echo "== GPU tests =="; cat "$logs/gpu-tests.txt"; fi
if [[ -s "$logs/failures.txt" ]]; then echo "== failures =="; cat "$logs/failures.txt"; fi
echo "== summary =="
printf '%s\n' "${summary[@]}"
echo "overall: $([[ $failed -eq 0 ]] && echo PASSED || echo FAILED)"
if [[ -n "${OUT:-}" ]]; then save_logs && rm -rf "$logs"; fi
exit $failed
