#!/usr/bin/env bash
# The shim's own cost per allocation+free pair, measured on the CUDA test
# doubles (no GPU: a pair costs only host code), against the doubles' own
# pool in the same run:
#   scripts/cpu-bench.sh [--build DIR] [--rounds R] [--pairs N] [--threads LIST] [--quick] [--baseline LIB]
# Each round runs tests/bench/cpu_pairs twice, alternating: the doubles' pool
# (cudaMallocAsync + cudaFreeAsync on the legacy stream) and the shim at its
# default settings (cudaMalloc + cudaFree, LD_PRELOAD). The report takes each
# side's fastest round and gives, for 1, 4 and 16 threads: ns per pair, the
# shim's own cost (the difference), pairs per second and each side's scaling
# over one thread. Written to ${OUT:-bench-results}/cpu-pairs.md and printed.
# No timing is asserted here: targets are read off the report.
# --quick: a few pairs (does it work?), as the CPU tier's bench.cpu_pairs runs it.
# --baseline LIB: also an earlier build of libasyncshim.so, in the same rounds
# (its own cost beside the shim's: a before and after from one run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=build-bench-cpu
rounds=5
pairs=200000
threads=1,4,16
baseline=""
while (($# > 0)); do
  case $1 in
    --build | --rounds | --pairs | --threads | --baseline)
      if (($# < 2)); then echo "cpu-bench.sh: $1 needs a value" >&2; exit 2; fi
      case $1 in
        --build) build=$2 ;;
        --rounds) rounds=$2 ;;
        --pairs) pairs=$2 ;;
        --threads) threads=$2 ;;
        --baseline) baseline=$(realpath "$2") ;;
      esac
      shift ;;
    --quick) rounds=1; pairs=2000 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu-bench.sh: unknown argument '$1' (--build DIR, --rounds R, --pairs N, --threads LIST, --quick, --baseline LIB)" >&2
      exit 2 ;;
  esac
  shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "cpu-bench.sh: --rounds $rounds: expected a positive number" >&2; exit 2; }
if [[ -n $baseline && ! -f $baseline ]]; then
  echo "cpu-bench.sh: --baseline $baseline: no such file (expected an earlier build of libasyncshim.so)" >&2
  exit 2
fi

# The shim runs at its defaults: nothing inherited.
for v in $(compgen -e); do
  case $v in ASYNCSHIM_* | LD_PRELOAD) unset "$v" ;; esac
done

shim=$build/shim/libasyncshim.so
bench=$build/tests/bench/cpu_pairs
if [[ ! -x $bench || ! -f $shim ]]; then
  echo "building $build ..."
  if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DASYNCSHIM_FUZZ=OFF &&
    cmake --build "$build" --target asyncshim cpu_pairs; } >/tmp/cpu-bench-build.$$.log 2>&1; then
    tail -30 /tmp/cpu-bench-build.$$.log
    echo "cpu-bench.sh: build FAILED" >&2
    exit 1
  fi
  rm -f /tmp/cpu-bench-build.$$.log
fi

out=${OUT:-bench-results}
mkdir -p "$out"
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  "$bench" --api pool --threads "$threads" --pairs "$pairs" >>"$lines" || { echo "cpu-bench.sh: the doubles' pool run failed" >&2; exit 1; }
  LD_PRELOAD=$(realpath "$shim") "$bench" --api malloc --threads "$threads" --pairs "$pairs" >>"$lines" ||
    { echo "cpu-bench.sh: the shim's run failed" >&2; exit 1; }
  if [[ -n $baseline ]]; then
    LD_PRELOAD=$baseline "$bench" --api malloc --threads "$threads" --pairs "$pairs" | sed 's/api=malloc/api=baseline/' >>"$lines" ||
      { echo "cpu-bench.sh: the baseline's run failed" >&2; exit 1; }
  fi
done

# The shim must have served the pairs itself (a shim that failed to load, or
# passed them through, would be measured as the doubles' native calls).
stats=$(mktemp)
ASYNCSHIM_STATS_FILE=$stats LD_PRELOAD=$(realpath "$shim") "$bench" --api malloc --threads 1 --pairs 1000 >/dev/null ||
  { echo "cpu-bench.sh: the shim's checking run failed" >&2; exit 1; }
python3 - "$stats" <<'EOF_CHECK' || exit 1
import json, sys
try:
    s = json.load(open(sys.argv[1]))
    d = s["devices"][0]
    served, passed = d["allocations"], d["passed_through"]["total"]
except Exception as e:
    sys.exit(f"cpu-bench.sh: the shim wrote no statistics ({e!r}): it did not serve the pairs")
if served < 2000 or passed != 0:
    sys.exit(f"cpu-bench.sh: the shim served {served} allocations and passed {passed} through; expected 2000 and 0")
print(f"cpu-bench.sh: the shim served the pairs ({served} allocations from its pool, none passed through)")
EOF_CHECK
rm -f "$stats"

python3 - "$lines" "$out/cpu-pairs.md" "$rounds" "$pairs" "$(git rev-parse --short HEAD 2>/dev/null)" "$baseline" <<'EOF'
import re, sys, datetime, os
lines, page, rounds, pairs, commit, baseline_label = sys.argv[1:7]
best = {}  # (api, threads) -> (ns_per_pair, pairs_per_second), the fastest round
for line in open(lines):
    m = re.match(r"cpu_pairs: api=(\w+) threads=(\d+) .* ns_per_pair=([\d.]+) pairs_per_second=(\d+)", line)
    if not m:
        continue
    key = (m.group(1), int(m.group(2)))
    value = (float(m.group(3)), float(m.group(4)))
    if key not in best or value[0] < best[key][0]:
        best[key] = value
threads = sorted({t for (_, t) in best})
has_baseline = any(api == "baseline" for (api, _) in best)
rows = []
for t in threads:
    if ("pool", t) not in best or ("malloc", t) not in best:
        sys.exit(f"cpu-bench.sh: no result for {t} threads")
    raw, shim = best[("pool", t)], best[("malloc", t)]
    raw_scaling = raw[1] / best[("pool", threads[0])][1]
    shim_scaling = shim[1] / best[("malloc", threads[0])][1]
    row = (f"| {t} | {raw[0]:.0f} | {shim[0]:.0f} | {shim[0] - raw[0]:+.0f} | {raw[1]:,.0f} | {shim[1]:,.0f} "
           f"| {shim[1] / raw[1]:.2f}x | {raw_scaling:.2f}x | {shim_scaling:.2f}x |")
    if ("baseline", t) in best:
        before = best[("baseline", t)]
        row += f" {before[0] - raw[0]:+.0f} | {before[1]:,.0f} |"
    rows.append(row)
text = [
    "# The shim's own cost per pair, on the CUDA test doubles",
    "",
    f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit or '?'}, {os.cpu_count()} CPUs; "
    f"4 KiB pairs, {pairs} per thread, the fastest of {rounds} round(s) per side "
    "(`scripts/cpu-bench.sh`). Raw pool: the doubles' `cudaMallocAsync` + `cudaFreeAsync` on the legacy stream; "
    "shim: `cudaMalloc` + `cudaFree` under `LD_PRELOAD` at default settings. ns per pair is one thread's, "
    "all threads running; scaling is pairs per second over the same side's at "
    f"{threads[0]} thread(s)." + (f" Baseline: `{baseline_label}`, in the same rounds." if has_baseline else ""),
    "",
    "| threads | raw pool ns/pair | shim ns/pair | shim's own cost (ns) | raw pairs/s | shim pairs/s | shim / raw | raw scaling | shim scaling |"
    + (" baseline's own cost (ns) | baseline pairs/s |" if has_baseline else ""),
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if has_baseline else ""),
    *rows,
    "",
]
open(page, "w").write("\n".join(text))
print("\n".join(text))
EOF
