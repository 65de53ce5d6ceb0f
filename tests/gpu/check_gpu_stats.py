"""GPU tier: the statistics of a real run agree with what the program
allocated, and observe mode counts the same as pool mode.

    python3 check_gpu_stats.py SHIM PROBE ENTRY_POINT

Runs `PROBE kernels` (201 cudaMalloc and 201 cudaFree, sizes known) in pool
and in observe mode, and checks that ENTRY_POINT (cudaMalloc for a program
with the shared runtime, cuMemAlloc_v2 for one with the static runtime)
caught them all. Prints "SKIP: ..." when there is no GPU.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import stats_schema  # noqa: E402


def expected_bytes():
    # shim_gpu_probe.cu, kernels(): one 8-byte sum buffer, then 200 buffers of
    # (2^(6 + round % 17) + round) unsigned ints.
    return 8 + sum(((1 << (6 + r % 17)) + r) * 4 for r in range(200))


def run(shim, probe, mode, directory):
    path = os.path.join(directory, f"{mode}-%p.json")
    env = dict(os.environ, LD_PRELOAD=shim, ASYNCSHIM_MODE=mode, ASYNCSHIM_STATS_FILE=path,
               ASYNCSHIM_INITIAL_POOL_SIZE="1GiB")
    out = subprocess.run([probe, "kernels"], env=env, capture_output=True, text=True, check=False)
    if "SKIP:" in out.stdout:
        print(out.stdout.strip())
        sys.exit(0)
    if out.returncode != 0:
        sys.exit(f"FAIL: {mode} run exited {out.returncode}:\n{out.stdout}{out.stderr}")
    files = [f for f in os.listdir(directory) if f.startswith(mode)]
    if len(files) != 1:
        sys.exit(f"FAIL: {mode} run wrote {files}")
    try:
        return stats_schema.load_and_validate(os.path.join(directory, files[0]))
    except stats_schema.StatsSchemaError as e:
        sys.exit(f"FAIL: {mode} run: {e}")


def main():
    shim, probe, entry_point = sys.argv[1], sys.argv[2], sys.argv[3]
    print(f"statistics schema validator: {stats_schema.validator_name()}")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        results = {mode: run(shim, probe, mode, d) for mode in ("pool", "observe")}
    for mode, stats in results.items():
        dev = stats["devices"][0]
        print(f"{mode}: {json.dumps(dev)}")
        for field, want in [("allocations", 201), ("frees", 201), ("bytes_requested", expected_bytes()),
                            ("bytes_in_use", 0), ("live_allocations", 0), ("failed_allocations", 0)]:
            if dev[field] != want:
                failures.append(f"{mode}: {field} is {dev[field]}, expected {want}")
        if dev["allocations_by_entry_point"][entry_point] != 201:
            failures.append(f"{mode}: {entry_point} caught {dev['allocations_by_entry_point']}, expected all 201")
        if not 0 < dev["peak_bytes_in_use"] <= expected_bytes():
            failures.append(f"{mode}: peak_bytes_in_use {dev['peak_bytes_in_use']} out of range")
    pool, observe = results["pool"]["devices"][0], results["observe"]["devices"][0]
    if pool["peak_bytes_in_use"] != observe["peak_bytes_in_use"]:
        failures.append("peak bytes in use differ between pool and observe mode")
    if pool["pool_reserved_high_water"] is None or pool["pool_reserved_high_water"] < (1 << 30):
        failures.append(f"pool reserved high-water {pool['pool_reserved_high_water']} below the 1 GiB primed")
    if observe["pool_reserved_high_water"] is not None:
        failures.append("observe mode reports a pool")
    for failure in failures:
        print("FAIL:", failure)
    print("stats agree" if not failures else "stats disagree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
