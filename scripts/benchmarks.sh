#!/usr/bin/env bash
# All benchmarks in one command, on a machine with a CUDA GPU, and the results
# page regenerated from them:
#   scripts/benchmarks.sh [--quick] [--skip-torch]
# Builds the shim and alloc_bench (using .deps/ from
# scripts/prepare-device-deps.sh where the Debian -dev packages are missing),
# then runs, each configuration in a process of its own (the shim reads its
# settings once per process):
#   - alloc+free pair latency, 256 B .. 256 MiB: native cudaMalloc and
#     cuMemAlloc, the raw pool (runtime and driver calls), and the shim in each
#     ordering through the runtime path (alloc_bench), the driver path of a
#     static runtime (alloc_bench_static) and cuMemAlloc called directly;
#   - churn (a live set of mixed sizes, a kernel per step, two streams);
#   - 1, 4 and 16 threads, pairs per second;
#   - the load-time cost of preloading the shim into programs without CUDA;
#   - PyTorch training loops (ResNet-18, a transformer encoder, an MLP) with
#     the caching allocator, backend:cudaMallocAsync, uncached natively and
#     uncached under the shim (device and stream ordering).
# Every shim run: LD_PRELOAD=<build>/shim/libasyncshim.so and
# ASYNCSHIM_INITIAL_POOL_SIZE=1GiB. Results go to ${OUT:-bench-results}/:
# PERFORMANCE.md (the page), results.json (everything) and raw/ (each run's
# output, runs.tsv with the exact commands, meta.tsv); with $OUT set (the
# device machine) raw/ is packed as raw.tgz. A short summary is printed last.
# Whole run: about 5 minutes on an H200, build included (PyTorch takes most
# of it). Each run has a timeout, cut to what is left of BENCH_TIME_LIMIT_S
# (default 480 s from the start, build included): whatever does not fit is
# listed as not run, so the script stays within the device's 10 minutes.
# --quick: a few iterations of everything (does it work?); --skip-torch: no
# PyTorch runs.
# Without a GPU everything still builds and the page says what was skipped.
set -uo pipefail
quick=0
skip_torch=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --skip-torch) skip_torch=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks.sh: unknown argument $arg (--quick, --skip-torch)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/bench-results}
mkdir -p "$out" && out=$(cd "$out" && pwd)
raw=$out/raw
rm -rf "$raw" "$out/raw.tgz" && mkdir -p "$raw"
build=${BUILD_DIR:-build-bench}
[[ $build == /* ]] || build=$root/$build
time_limit=${BENCH_TIME_LIMIT_S:-480}
start_all=$SECONDS

# Runs get exactly the allocator settings named for them, nothing inherited.
for v in $(compgen -e); do
  case $v in ASYNCSHIM_* | LD_PRELOAD | PYTORCH_NO_CUDA_MEMORY_CACHING | PYTORCH_CUDA_ALLOC_CONF) unset "$v" ;; esac
done

# ---- build --------------------------------------------------------------------
configure=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASYNCSHIM_FUZZ=OFF)
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
meta "build" "RelWithDebInfo, $(c++ --version 2>/dev/null | head -1)"
meta "commit" "$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
meta "PyTorch" "$("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'not installed')"
meta "command" "scripts/benchmarks.sh $*"

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
with_shim=("LD_PRELOAD=$shim" "ASYNCSHIM_INITIAL_POOL_SIZE=1GiB")

if ((quick)); then
  slow=200 fast=2000 sync_pairs=1000 churn_slow=300 churn_fast=2000 seconds=0.3 true_runs=40 py_runs=6 steps=5 warmup=2
else
  # native cudaMalloc pairs are ~65 us (503 us at 256 MiB), pool pairs ~0.7 us
  slow=2000 fast=50000 sync_pairs=20000 churn_slow=3000 churn_fast=20000 seconds=1 true_runs=300 py_runs=40 steps=40 warmup=10
fi
sizes=256,4K,64K,1M,16M,256M

echo "== alloc+free pairs (${sizes})"
run pairs-pool-runtime 90 -- "$bench" pairs --api pool-runtime --size $sizes --iterations $fast
run pairs-pool-driver 90 -- "$bench" pairs --api pool-driver --size $sizes --iterations $fast
for ordering in device stream sync; do
  n=$fast
  [[ $ordering == sync ]] && n=$sync_pairs
  shim_env=("${with_shim[@]}" "ASYNCSHIM_ORDERING=$ordering")
  run "pairs-shim-$ordering-runtime" 90 "${shim_env[@]}" -- "$bench" pairs --api runtime --size $sizes --iterations $n
  run "pairs-shim-$ordering-static" 90 "${shim_env[@]}" -- "$bench_static" pairs --api runtime --size $sizes --iterations $n
  run "pairs-shim-$ordering-driver" 90 "${shim_env[@]}" -- "$bench" pairs --api driver --size $sizes --iterations $n
done
run pairs-native-runtime 90 -- "$bench" pairs --api runtime --size $sizes --iterations $slow
run pairs-native-driver 90 -- "$bench" pairs --api driver --size $sizes --iterations $slow

echo "== churn (64 live buffers, a kernel per step, legacy + non-blocking stream)"
run churn-pool-runtime 90 -- "$bench" churn --api pool-runtime --steps $churn_fast --live 64
run churn-pool-driver 90 -- "$bench" churn --api pool-driver --steps $churn_fast --live 64
for ordering in device stream sync; do
  shim_env=("${with_shim[@]}" "ASYNCSHIM_ORDERING=$ordering")
  run "churn-shim-$ordering-runtime" 90 "${shim_env[@]}" -- "$bench" churn --api runtime --steps $churn_fast --live 64
  run "churn-shim-$ordering-static" 90 "${shim_env[@]}" -- "$bench_static" churn --api runtime --steps $churn_fast --live 64
done
run churn-native-runtime 90 -- "$bench" churn --api runtime --steps $churn_slow --live 64

echo "== threads (1, 4, 16; 4 KiB pairs, each thread its own non-blocking stream)"
threads=(--threads "1,4,16" --seconds "$seconds" --size 4K)
run threads-pool-runtime 60 -- "$bench" threads --api pool-runtime "${threads[@]}"
run threads-pool-driver 60 -- "$bench" threads --api pool-driver "${threads[@]}"
for ordering in device stream sync; do
  run "threads-shim-$ordering-runtime" 60 "${with_shim[@]}" "ASYNCSHIM_ORDERING=$ordering" -- \
    "$bench" threads --api runtime "${threads[@]}"
done
run threads-shim-device-static 60 "${with_shim[@]}" "ASYNCSHIM_ORDERING=device" -- \
  "$bench_static" threads --api runtime "${threads[@]}"
run threads-native-runtime 60 -- "$bench" threads --api runtime "${threads[@]}"

echo "== load-time cost (programs that never use CUDA)"
run load-true 60 -- "$bench" load-time --preload "$shim" --set ASYNCSHIM_INITIAL_POOL_SIZE=1GiB --runs $true_runs \
  --label /bin/true -- /bin/true
run load-python 120 -- "$bench" load-time --preload "$shim" --set ASYNCSHIM_INITIAL_POOL_SIZE=1GiB --runs $py_runs \
  --label 'python3 -c pass' -- "$py" -c pass

if ((skip_torch)); then
  echo "== PyTorch: skipped (--skip-torch)"
else
  echo "== PyTorch training loops ($steps steps after $warmup warm-up)"
  torch_bench=(tests/bench/torch_bench.py --steps "$steps" --warmup "$warmup")
  if ! "$py" -c 'import torch' 2>/dev/null; then
    run torch 60 -- "$py" "${torch_bench[@]}" --model mlp  # says SKIP, for the page
  else
    for model in resnet18 transformer mlp; do
      run "torch-$model-caching" 180 -- "$py" "${torch_bench[@]}" --model $model
      run "torch-$model-cudamallocasync" 180 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- \
        "$py" "${torch_bench[@]}" --model $model
      run "torch-$model-uncached-native" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- "$py" "${torch_bench[@]}" --model $model
      for ordering in device stream; do
        run "torch-$model-uncached-shim-$ordering" 180 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${with_shim[@]}" \
          "ASYNCSHIM_ORDERING=$ordering" -- "$py" "${torch_bench[@]}" --model $model
      done
    done
  fi
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
