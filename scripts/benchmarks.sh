#!/usr/bin/env bash
# All benchmarks in one command, on a machine with a CUDA GPU, and the results
# page regenerated from them:
#   scripts/benchmarks.sh [--quick] [--skip-torch] [--baseline LIB [--baseline-label TEXT]]
#   scripts/benchmarks.sh --cpu [OPTIONS]   (no GPU: the shim's own cost per
#     pair on the CUDA test doubles; scripts/cpu-bench.sh, whose options follow)
# Builds the shim and alloc_bench (using .deps/ from
# scripts/prepare-device-deps.sh where the Debian -dev packages are missing),
# then runs, each configuration in a process of its own (the shim reads its
# settings once per process):
#   - alloc+free pair latency, 256 B .. 256 MiB: native cudaMalloc and
#     cuMemAlloc, the raw pool (runtime and driver calls), and the shim in each
#     ordering through the runtime path (alloc_bench), the driver path of a
#     static runtime (alloc_bench_static) and cuMemAlloc called directly;
#   - pinned pairs (cudaMallocHost + cudaFreeHost, the same sizes): natively,
#     under the shim with ASYNCSHIM_HOST_POOL=1, and the raw pool in host memory;
#   - pitched pairs (cudaMallocPitch + cudaFree, 64 KiB, 16 MiB, 256 MiB),
#     natively and under the shim, against the raw pool's pair of each size;
#   - churn (a live set of mixed sizes, a kernel per step, two streams);
#   - what observing costs on the same pairs: the leak report, its call
#     stacks (8 frames) and the event log (ASYNCSHIM_LEAK_REPORT,
#     ASYNCSHIM_LEAK_STACK_DEPTH, ASYNCSHIM_EVENT_LOG);
#   - 1, 4 and 16 threads, pairs per second;
#   - the first allocation and the growth of a pool that starts empty (the
#     shim's default), against the raw pool, native cudaMalloc and the shim
#     with ASYNCSHIM_INITIAL_POOL_SIZE=half-free (its former default);
#   - the load-time cost of preloading the shim into programs without CUDA;
#   - PyTorch training loops (ResNet-18, a transformer encoder, an MLP) with
#     the caching allocator, uncached natively and
#     uncached under the shim (device and stream ordering, and device with the
#     reuse cache off), and the memory the shim's pool holds for them (also
#     with the reuse cache off).
# Every shim run: LD_PRELOAD=<build>/shim/libasyncshim.so and
# ASYNCSHIM_INITIAL_POOL_SIZE=1GiB. Results go to ${OUT:-bench-results}/:
# PERFORMANCE.md (the page: this run's tables and targets), RESULTS-entry.md
# (a section for tests/bench/RESULTS.md: the command, the before/after
# comparison and every run), results.json (everything) and raw/ (each run's
# output, runs.tsv with the exact commands, meta.tsv); with $OUT set (the
# device machine) raw/ is packed as raw.tgz. A short summary is printed last.
# The allocator runs come in three rounds (the headline pairs in seven: the
# page takes each pair's fastest round, the rest medians; the before/after
# table takes each side's fastest round) and PyTorch's headline
# configurations in two.
# Whole run: about 8 minutes on an H200 with --baseline, build included
# (PyTorch takes most of it). Each run has a timeout, cut to what is left of
# BENCH_TIME_LIMIT_S (default 560 s from the start, build included): whatever
# does not fit is listed as not run, so the script stays within the device's
# 10 minutes. BENCH_COMMIT names the commit on the page where git cannot.
# --quick: a few iterations of everything (does it work?); --skip-torch: no
# PyTorch runs; --baseline LIB: also runs the shim's default configuration
# (pairs, churn, threads, PyTorch) with LIB, an earlier build of
# libasyncshim.so, in the same run, and RESULTS-entry.md compares before and
# after (--baseline-label names it, e.g. the commit it was built from).
# Without a GPU everything still builds and the page says what was skipped.
set -uo pipefail
command_args=$(printf ' %q' "$@")
quick=0
skip_torch=0
baseline=""
baseline_label=""
while (($# > 0)); do
  case $1 in
    --cpu) shift; exec "$(dirname "$0")/cpu-bench.sh" "$@" ;;
    --quick) quick=1 ;;
    --skip-torch) skip_torch=1 ;;
    --baseline | --baseline-label)
      if (($# < 2)); then echo "benchmarks.sh: $1 needs a value" >&2; exit 2; fi
      if [[ $1 == --baseline ]]; then baseline=$2; else baseline_label=$2; fi
      shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks.sh: unknown argument $1 (--cpu, --quick, --skip-torch, --baseline LIB, --baseline-label TEXT)" >&2
      exit 2 ;;
  esac
  shift
done
if [[ -n $baseline && ! -f $baseline ]]; then
  echo "benchmarks.sh: --baseline $baseline: no such file (expected an earlier build of libasyncshim.so)" >&2
  exit 2
fi
[[ -z $baseline || $baseline == /* ]] || baseline=$PWD/$baseline
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/bench-results}
mkdir -p "$out" && out=$(cd "$out" && pwd)
raw=$out/raw
rm -rf "$raw" "$out/raw.tgz" && mkdir -p "$raw"
build=${BUILD_DIR:-build-bench}
[[ $build == /* ]] || build=$root/$build
time_limit=${BENCH_TIME_LIMIT_S:-560}
start_all=$SECONDS

# Runs get exactly the allocator settings named for them, nothing inherited.
for v in $(compgen -e); do
  case $v in ASYNCSHIM_* | LD_PRELOAD | PYTORCH_NO_CUDA_MEMORY_CACHING | PYTORCH_CUDA_ALLOC_CONF) unset "$v" ;; esac
done

# ---- build --------------------------------------------------------------------
configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DASYNCSHIM_FUZZ=OFF)
if [[ -d .deps ]]; then configure+=("-DASYNCSHIM_DEPS_DIR=$PWD/.deps" "-DGTEST_ROOT=$PWD/.deps"); fi
echo "building in $build ..."
if ! { cmake -S . -B "$build" "${configure[@]}" &&
  cmake --build "$build" --parallel --target asyncshim alloc_bench alloc_bench_static; } >"$raw/build.log" 2>&1; then
  tail -30 "$raw/build.log"
  echo "benchmarks: build FAILED (see $raw/build.log)"
  exit 1
fi
echo "build: ok in $((SECONDS - start_all)) s"
shim=$build/shim/libasyncshim.so
bench=$build/tests/bench/alloc_bench
bench_static=$build/tests/bench/alloc_bench_static
# The real interpreter, not a wrapper script (a pyenv shim would start several
# processes, each paying for the preload, in the load-time measurement).
py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || command -v python3)

# ---- the machine --------------------------------------------------------------
meta() { printf '%s\t%s\n' "$1" "$2" >>"$raw/meta.tsv"; }
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
if nvidia-smi >/dev/null 2>&1; then
  meta GPU "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
  meta driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1) (CUDA $(nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | grep -o '[0-9.]*$'))"
else
  meta GPU "none (nvidia-smi fails)"
fi
meta "CUDA toolkit" "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || /usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*')"
meta "host" "$(uname -r), $(nproc) CPUs"
meta "build" "Release, $(c++ --version 2>/dev/null | head -1)"
# BENCH_COMMIT names the commit where git cannot (a copy of the working tree
# whose .git is stale or missing, as on the device machine).
meta "commit" "${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')}"
meta "PyTorch" "$("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'not installed')"
meta "command" "scripts/benchmarks.sh${command_args}"
[[ -n $baseline ]] && meta "baseline" "${baseline_label:-an earlier build} (\`${baseline#"$root"/}\`)"

# ---- running ------------------------------------------------------------------
failed=0
# run NAME TIMEOUT [VAR=VALUE...] -- PROGRAM ARGS...: standard output to
# raw/NAME.out, standard error to raw/NAME.err, the command to raw/runs.tsv;
# the lines for people are echoed.
run() {
  local name=$1 limit=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  # A run never outlasts the time limit of the whole script: its timeout is cut
  # to what is left, and with less than 15 s left it is not started.
  local left=$((time_limit - (SECONDS - start_all)))
  if ((left < 15)); then
    printf '%s\t%s\t%s\t%s\n' "$name" "" "" "not run: the time limit of $time_limit s was reached" >>"$raw/runs.tsv"
    echo "  $name: not run (time limit reached)"
    return
  fi
  ((limit > left)) && limit=$left
  local command=(timeout -k 5 "$limit" env "${envs[@]}" "$@")
  local text="" word
  for word in "${command[@]}"; do  # quoted only where a shell needs it
    [[ $word =~ ^[A-Za-z0-9_./=,:+@%-]+$ ]] || word=$(printf '%q' "$word")
    text+="$word "
  done
  text=${text//$root\//}
  local t0 status ms
  t0=$(date +%s%N)
  "${command[@]}" >"$raw/$name.out" 2>"$raw/$name.err"
  status=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%s\t%s\t%d.%03d\t%s\n' "$name" "$status" $((ms / 1000)) $((ms % 1000)) "${text% }" >>"$raw/runs.tsv"
  grep -hE '^(alloc_bench|torch_bench|SKIP)' "$raw/$name.out" | sed 's/^/  /'
  if [[ $status -ne 0 ]]; then
    failed=1
    echo "  $name: exit $status$([[ $status -eq 124 ]] && echo ' (timed out)'); last lines of its error output:"
    tail -5 "$raw/$name.err" | sed 's/^/    /'
  fi
}
# The shim's initial pool in every run under it (the raw pool of alloc_bench is
# primed with as much by default: --pool-prime 1G).
pool_size=1GiB
with_shim=("LD_PRELOAD=$shim" "ASYNCSHIM_INITIAL_POOL_SIZE=$pool_size")

if ((quick)); then
  slow=200 fast=2000 sync_pairs=1000 churn_slow=300 churn_fast=2000 seconds=0.3 true_runs=40 py_runs=6 steps=5 warmup=2
else
  # native cudaMalloc pairs are ~65 us (503 us at 256 MiB), pool pairs ~0.7 us
  slow=2000 fast=50000 sync_pairs=20000 churn_slow=3000 churn_fast=20000 seconds=0.5 true_runs=300 py_runs=40 steps=40 warmup=10
fi
sizes=256,4K,64K,1M,16M,256M
small_sizes=256,4K,64K
pitched_sizes=64K,16M,256M  # each pitch x 4 rows: the pool pairs' sizes
pinned_sizes=64K,16M,256M
pinned_native=20  # a native pinned pair costs 0.7 ms at 64 KiB, 100 ms at 256 MiB
((quick)) && pinned_native=2
threads=(--threads "1,4,16" --seconds "$seconds" --size 4K)
torch_ok=0
((!skip_torch)) && "$py" -c 'import torch' 2>/dev/null && torch_ok=1
torch_bench=(tests/bench/torch_bench.py --steps "$steps" --warmup "$warmup")
before_env=("LD_PRELOAD=$baseline" "ASYNCSHIM_INITIAL_POOL_SIZE=$pool_size")
event_logs=$(mktemp -d "${TMPDIR:-/tmp}/asyncshim-bench-logs.XXXXXX")
trap 'rm -rf "$event_logs"' EXIT
# alloc_bench tells a shim run by a loaded library named libasyncshim*: a
# baseline saved under another name would be counted as native and its
# before/after rows lost, so it runs as <build>/baseline/libasyncshim.so.
if [[ -n $baseline ]]; then
  mkdir -p "$build/baseline" && cp "$baseline" "$build/baseline/libasyncshim.so" &&
    before_env[0]="LD_PRELOAD=$build/baseline/libasyncshim.so" || exit 1
fi

# The machine's speed drifts over minutes: the allocator runs come in rounds,
# each configuration once per round, and the page takes the median of the
# rounds (of pairs, and of each side of the before/after table, the fastest
# round: a process's pair runs at one of two speeds on the H200, the raw
# pool's too, with the CPU it runs on: tests/bench/RESULTS.md).
# The first round has every configuration; rounds 2 and 3 the headline
# comparisons (raw pool, the shim's default, the baseline); rounds 4 to 7
# only the headline pairs, so that every configuration has fast rounds. The
# pairs of every round have every size: the goal is for each of them.
rounds=$((quick ? 1 : 3))
pair_rounds=$((quick ? 1 : 7))
for ((round = 1; round <= pair_rounds; ++round)); do
  r="-r$round"
  first=$((round == 1))
  full=$((round <= rounds))
  # The first round: every ordering; the later ones the headline.
  orderings=(device)
  ((first)) && orderings=(device stream sync)
  echo "== round $round of $pair_rounds: alloc+free pairs ($sizes)"
  run "pairs-pool-runtime$r" 90 -- "$bench" pairs --api pool-runtime --size $sizes --iterations $fast
  run "pairs-pool-driver$r" 90 -- "$bench" pairs --api pool-driver --size $sizes --iterations $fast
  for ordering in "${orderings[@]}"; do
    n=$fast
    [[ $ordering == sync ]] && n=$sync_pairs
    shim_env=("${with_shim[@]}" "ASYNCSHIM_ORDERING=$ordering")
    run "pairs-shim-$ordering-runtime$r" 90 "${shim_env[@]}" -- "$bench" pairs --api runtime --size $sizes --iterations $n
    run "pairs-shim-$ordering-static$r" 90 "${shim_env[@]}" -- "$bench_static" pairs --api runtime --size $sizes --iterations $n
    ((full)) && run "pairs-shim-$ordering-driver$r" 90 "${shim_env[@]}" -- \
      "$bench" pairs --api driver --size $sizes --iterations $n
  done
  # The reuse cache off (on by default): what it gives.
  if ((full)); then
    no_reuse_env=("${with_shim[@]}" ASYNCSHIM_REUSE_CACHE=0)
    run "pairs-shim-no-reuse-runtime$r" 90 "${no_reuse_env[@]}" -- "$bench" pairs --api runtime --size $sizes --iterations $fast
    run "pairs-shim-no-reuse-static$r" 90 "${no_reuse_env[@]}" -- "$bench_static" pairs --api runtime --size $sizes --iterations $fast
  fi
  # What observing costs (all off by default): the same pairs with the leak
  # report, with its call stacks, and with the event log (written to a scratch
  # folder, removed at the end; RMM's CSV is about 60 bytes a line).
  run "pairs-shim-leak-report-runtime$r" 90 "${with_shim[@]}" ASYNCSHIM_LEAK_REPORT=1 -- \
    "$bench" pairs --api runtime --size $small_sizes --iterations $fast
  ((full)) && run "pairs-shim-leak-stacks-runtime$r" 90 "${with_shim[@]}" ASYNCSHIM_LEAK_REPORT=1 \
    ASYNCSHIM_LEAK_STACK_DEPTH=8 -- "$bench" pairs --api runtime --size $small_sizes --iterations $fast
  run "pairs-shim-event-log-runtime$r" 90 "${with_shim[@]}" "ASYNCSHIM_EVENT_LOG=$event_logs/pairs-runtime$r-%p.csv" -- \
    "$bench" pairs --api runtime --size $small_sizes --iterations $fast
  run "pairs-shim-event-log-static$r" 90 "${with_shim[@]}" "ASYNCSHIM_EVENT_LOG=$event_logs/pairs-static$r-%p.csv" -- \
    "$bench_static" pairs --api runtime --size $small_sizes --iterations $fast
  rm -f "$event_logs"/*.csv
  if [[ -n $baseline ]]; then
    run "before-pairs-runtime$r" 90 "${before_env[@]}" -- "$bench" pairs --api runtime --size $sizes --iterations $fast
    run "before-pairs-static$r" 90 "${before_env[@]}" -- "$bench_static" pairs --api runtime --size $sizes --iterations $fast
  fi
  # Pitched pairs (cudaMallocPitch + cudaFree, 4 rows): the shim's, and natively once.
  ((full)) && run "pairs-shim-device-pitched$r" 90 "${with_shim[@]}" -- \
    "$bench" pairs --api pitched --size $pitched_sizes --iterations $fast
  # Pinned pairs (cudaMallocHost + cudaFreeHost): the raw pool in host memory, the shim's host pool, native once.
  if ((full)); then
    run "pairs-pool-host$r" 90 -- "$bench" pairs --api pool-host --size $pinned_sizes --iterations $fast
    run "pairs-shim-device-pinned$r" 90 "${with_shim[@]}" ASYNCSHIM_HOST_POOL=1 -- \
      "$bench" pairs --api pinned --size $pinned_sizes --iterations $sync_pairs
  fi
  if ((first)); then
    run pairs-native-pinned 90 -- "$bench" pairs --api pinned --size $pinned_sizes --iterations $pinned_native
    run pairs-native-runtime 90 -- "$bench" pairs --api runtime --size $sizes --iterations $slow
    run pairs-native-driver 90 -- "$bench" pairs --api driver --size $sizes --iterations $slow
    run pairs-native-pitched 90 -- "$bench" pairs --api pitched --size $pitched_sizes --iterations $slow
  fi
  ((full)) || continue

  echo "== round $round: churn (64 live buffers, a kernel per step, legacy + non-blocking stream)"
  run "churn-pool-runtime$r" 90 -- "$bench" churn --api pool-runtime --steps $churn_fast --live 64
  ((first)) && run churn-pool-driver 90 -- "$bench" churn --api pool-driver --steps $churn_fast --live 64
  for ordering in "${orderings[@]}"; do
    shim_env=("${with_shim[@]}" "ASYNCSHIM_ORDERING=$ordering")
    run "churn-shim-$ordering-runtime$r" 90 "${shim_env[@]}" -- "$bench" churn --api runtime --steps $churn_fast --live 64
    ((first)) && run "churn-shim-$ordering-static" 90 "${shim_env[@]}" -- "$bench_static" churn --api runtime --steps $churn_fast --live 64
  done
  ((first)) && run churn-shim-no-reuse-runtime 90 "${with_shim[@]}" ASYNCSHIM_REUSE_CACHE=0 -- \
    "$bench" churn --api runtime --steps $churn_fast --live 64
  [[ -n $baseline ]] && run "before-churn-runtime$r" 90 "${before_env[@]}" -- "$bench" churn --api runtime --steps $churn_fast --live 64
  ((first)) && run churn-native-runtime 90 -- "$bench" churn --api runtime --steps $churn_slow --live 64

  echo "== round $round: threads (1, 4, 16; 4 KiB pairs, each thread its own non-blocking stream)"
  run "threads-pool-runtime$r" 60 -- "$bench" threads --api pool-runtime "${threads[@]}"
  ((first)) && run threads-pool-driver 60 -- "$bench" threads --api pool-driver "${threads[@]}"
  for ordering in "${orderings[@]}"; do
    run "threads-shim-$ordering-runtime$r" 60 "${with_shim[@]}" "ASYNCSHIM_ORDERING=$ordering" -- \
      "$bench" threads --api runtime "${threads[@]}"
  done
  ((first)) && run threads-shim-device-static 60 "${with_shim[@]}" "ASYNCSHIM_ORDERING=device" -- \
    "$bench_static" threads --api runtime "${threads[@]}"
  # Not the default: each thread allocating on its own per-thread stream.
  ((first)) && run threads-shim-device-per-thread-runtime 60 "${with_shim[@]}" "ASYNCSHIM_ORDERING=device" \
    ASYNCSHIM_STREAM=per-thread -- "$bench" threads --api runtime "${threads[@]}"
  ((first)) && run threads-shim-no-reuse-runtime 60 "${with_shim[@]}" ASYNCSHIM_REUSE_CACHE=0 -- \
    "$bench" threads --api runtime "${threads[@]}"
  [[ -n $baseline ]] && run "before-threads-runtime$r" 60 "${before_env[@]}" -- "$bench" threads --api runtime "${threads[@]}"
  ((first)) && run threads-native-runtime 60 -- "$bench" threads --api runtime "${threads[@]}"
done

echo "== first allocation and growth (a pool that starts empty; every allocation synchronized)"
former=("LD_PRELOAD=$shim" ASYNCSHIM_INITIAL_POOL_SIZE=half-free ASYNCSHIM_IDLE_RELEASE=off)
for shape in 2M:2G 64M:8G; do
  size=${shape%%:*} total=${shape#*:}
  growth=(growth --size "$size" --total "$total")
  run "growth-native-$size" 120 -- "$bench" "${growth[@]}" --api runtime --label "native cudaMalloc"
  run "growth-pool-$size" 120 -- "$bench" "${growth[@]}" --api pool-runtime --pool-prime 0 --label "raw pool, empty"
  run "growth-shim-$size" 120 "LD_PRELOAD=$shim" -- "$bench" "${growth[@]}" --api runtime --label "shim, defaults"
  run "growth-shim-static-$size" 120 "LD_PRELOAD=$shim" -- "$bench_static" "${growth[@]}" --api runtime \
    --label "shim, defaults, static runtime"
  run "growth-shim-half-free-$size" 120 "${former[@]}" -- "$bench" "${growth[@]}" --api runtime \
    --label "shim, half-free, no idle release (the former defaults)"
  run "growth-shim-half-free-static-$size" 120 "${former[@]}" -- "$bench_static" "${growth[@]}" --api runtime \
    --label "shim, half-free, no idle release, static runtime"
  [[ -n $baseline ]] && run "before-growth-$size" 120 "${before_env[0]}" -- "$bench" "${growth[@]}" --api runtime \
    --label "${baseline_label:-the baseline}, its defaults"
done

echo "== load-time cost (programs that never use CUDA)"
run load-true 60 -- "$bench" load-time --preload "$shim" --set "ASYNCSHIM_INITIAL_POOL_SIZE=$pool_size" --runs $true_runs \
  --label /bin/true -- /bin/true
run load-python 120 -- "$bench" load-time --preload "$shim" --set "ASYNCSHIM_INITIAL_POOL_SIZE=$pool_size" --runs $py_runs \
  --label 'python3 -c pass' -- "$py" -c pass

if ((skip_torch)); then
  echo "== PyTorch: skipped (--skip-torch)"
elif ((!torch_ok)); then
  run torch 60 -- "$py" "${torch_bench[@]}" --model mlp  # says SKIP, for the page
else
  # Two rounds of the headline (caching allocator, uncached under the
  # shim's default, the baseline), one of the rest.
  torch_rounds=$((quick ? 1 : 2))
  for ((round = 1; round <= torch_rounds; ++round)); do
    r="-r$round"
    echo "== round $round of $torch_rounds: PyTorch training loops ($steps steps after $warmup warm-up)"
    for model in resnet18 transformer mlp; do
      run "torch-$model-caching$r" 180 -- "$py" "${torch_bench[@]}" --model $model
      run "torch-$model-uncached-shim-device$r" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${with_shim[@]}" \
        ASYNCSHIM_ORDERING=device -- "$py" "${torch_bench[@]}" --model $model
      [[ -n $baseline ]] && run "before-torch-$model$r" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${before_env[@]}" -- \
        "$py" "${torch_bench[@]}" --model $model
      ((round == 1)) || continue
      run "torch-$model-uncached-native" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- "$py" "${torch_bench[@]}" --model $model
      run "torch-$model-uncached-shim-stream" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${with_shim[@]}" \
        ASYNCSHIM_ORDERING=stream -- "$py" "${torch_bench[@]}" --model $model
      # The memory held, with the shim's default settings (no initial pool).
      run "torch-$model-uncached-shim-memory" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$shim" -- \
        "$py" "${torch_bench[@]}" --model $model --purpose memory
      # The same two with the reuse cache off: what it costs and gives.
      run "torch-$model-uncached-shim-no-reuse" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${with_shim[@]}" \
        ASYNCSHIM_REUSE_CACHE=0 -- "$py" "${torch_bench[@]}" --model $model
      run "torch-$model-uncached-shim-no-reuse-memory" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "LD_PRELOAD=$shim" \
        ASYNCSHIM_REUSE_CACHE=0 -- "$py" "${torch_bench[@]}" --model $model --purpose memory
    done
  done
fi

# ---- the page -----------------------------------------------------------------
meta "total time" "$((SECONDS - start_all)) s (build included)"
if ! summary=$("$py" tests/bench/report.py --raw "$raw" --markdown "$out/PERFORMANCE.md" --json "$out/results.json" 2>&1); then
  failed=1
fi
echo "$summary" >"$raw/summary.txt"
if [[ -n "${OUT:-}" ]]; then tar czf "$out/raw.tgz" -C "$out" raw && rm -rf "$raw"; fi
echo "== summary =="
echo "$summary"
echo "page: $out/PERFORMANCE.md; everything: $out/results.json; raw logs: $([[ -n "${OUT:-}" ]] && echo "$out/raw.tgz" || echo "$raw/")"
echo "total: $((SECONDS - start_all)) s; runs: $([[ $failed -eq 0 ]] && echo 'all ok' || echo 'SOME FAILED (see above)')"
exit $failed
