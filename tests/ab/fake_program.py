#!/usr/bin/env python3
"""A stand-in for a CUDA program, for the asyncshim-ab tests: it sleeps for a
controlled time and writes a statistics file like the shim's to
$ASYNCSHIM_STATS_FILE (%p -> its pid), so the wrapper needs no real shim and
no GPU. Everything is controlled by environment variables:

  FAKE_SLEEP_MS         sleep this long (default 0)
  FAKE_SLEEP_MS_B       sleep this long instead when ASYNCSHIM_MODE=pool
  FAKE_EXIT             exit with this status (default 0)
  FAKE_EXIT_B           exit with this status instead when ASYNCSHIM_MODE=pool
  FAKE_LOG              append one JSON line per invocation (mode, LD_PRELOAD,
                        FAKE_TAG, stats file template, names of the ASYNCSHIM_*
                        variables) to this file
  FAKE_FAIL_ON_RUN=K    exit with FAKE_FAIL_EXIT (default 3) on the K-th
                        invocation (counted in FAKE_LOG, warm-ups included)
  FAKE_KILL_SIGNAL=N    kill itself with signal N
  FAKE_OUTPUT_LINES=N   print N numbered lines (half to stdout, half to stderr)
  FAKE_NO_STATS=1       write no statistics file (no GPU / no CUDA calls)
  FAKE_NO_STATS_B=1     the same, only when ASYNCSHIM_MODE=pool
  FAKE_STATS_FORMAT     "format" to write (default asyncshim-stats)
  FAKE_STATS_VERSION    "format_version" to write (default 1)
  FAKE_STATS_MODE       "mode" to write (default: $ASYNCSHIM_MODE)
  FAKE_CHILDREN=N       also start N child processes that write their own
                        statistics file (the same figures), to test %p

Figures written per process (mode pool / otherwise):
  device 0: allocations 10, peak_bytes_in_use 5000, high-water 1 GiB / null,
            time_in_calls_ns cudaMalloc 1,000,000 / 3,000,000, cudaFree 500,000
  device 1: allocations 5, peak_bytes_in_use 3000, high-water 2 GiB / null,
            time_in_calls_ns cudaMalloc 200,000 / 600,000, cudaFree 100,000
  unattributed time_in_calls_ns cudaFree 100; failed_allocations 0 and 1.
So one process: allocations 15, peak 8000, high-water 3 GiB / null, failed 1,
time in calls 1,800,100 ns (pool) / 4,200,100 ns (otherwise).
"""

import json
import os
import sys
import time

GIB = 1 << 30


def stats_document(mode):
    pool = mode == "pool"
    return {
        "format": os.environ.get("FAKE_STATS_FORMAT", "asyncshim-stats"),
        "format_version": int(os.environ.get("FAKE_STATS_VERSION", "1")),
        "shim_version": "0.1.0",
        "pid": os.getpid(),
        "mode": os.environ.get("FAKE_STATS_MODE", mode),
        "settings": {"ASYNCSHIM_INITIAL_POOL_SIZE": "0"},
        "a_field_from_the_future": {"ignored": True},
        "devices": [
            {"device": 0, "allocations": 10, "frees": 9, "bytes_requested": 12345,
             "bytes_in_use": 100, "peak_bytes_in_use": 5000, "live_allocations": 1,
             "pool_reserved_high_water": GIB if pool else None,
             "passed_through": {"total": 2, "zero_size": 2},
             "failed_allocations": 0,
             "time_in_calls_ns": {"cudaMalloc": 1000000 if pool else 3000000,
                                  "cudaFree": 500000}},
            {"device": 1, "allocations": 5, "frees": 5, "bytes_requested": 999,
             "bytes_in_use": 0, "peak_bytes_in_use": 3000, "live_allocations": 0,
             "pool_reserved_high_water": 2 * GIB if pool else None,
             "passed_through": {"total": 0},
             "failed_allocations": 1,
             "time_in_calls_ns": {"cudaMalloc": 200000 if pool else 600000,
                                  "cudaFree": 100000}},
        ],
        "unattributed": {"allocations_passed_through": 0, "frees_passed_through": 3,
                         "time_in_calls_ns": {"cudaMalloc": 0, "cudaFree": 100}},
    }


def write_stats(mode):
    template = os.environ.get("ASYNCSHIM_STATS_FILE")
    if not template:
        return
    if os.environ.get("FAKE_NO_STATS") == "1":
        return
    if mode == "pool" and os.environ.get("FAKE_NO_STATS_B") == "1":
        return
    path = template.replace("%p", str(os.getpid()))
    with open(path, "w") as fh:
        json.dump(stats_document(mode), fh)


def main():
    env = os.environ
    mode = env.get("ASYNCSHIM_MODE", "")
    pool = mode == "pool"

    if env.get("FAKE_IS_CHILD") == "1":
        write_stats(mode)
        return 0

    invocation = 0
    log = env.get("FAKE_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps({"mode": mode, "ld_preload": env.get("LD_PRELOAD"),
                                 "tag": env.get("FAKE_TAG"),
                                 "stats_file": env.get("ASYNCSHIM_STATS_FILE"),
                                 "asyncshim_variables": sorted(
                                     k for k in env if k.upper().startswith("ASYNCSHIM_"))})
                     + "\n")
        with open(log) as fh:
            invocation = sum(1 for _ in fh)

    for _ in range(int(env.get("FAKE_CHILDREN", "0"))):
        import subprocess
        child_env = dict(env, FAKE_IS_CHILD="1")
        subprocess.run([sys.executable, "-S", os.path.abspath(__file__)], env=child_env, check=True)

    sleep_ms = float(env.get("FAKE_SLEEP_MS", "0"))
    if pool and env.get("FAKE_SLEEP_MS_B"):
        sleep_ms = float(env["FAKE_SLEEP_MS_B"])
    if sleep_ms > 0:
        time.sleep(sleep_ms / 1000.0)

    lines = int(env.get("FAKE_OUTPUT_LINES", "0"))
    for i in range(1, lines + 1):
        stream = sys.stdout if i % 2 else sys.stderr
        print("fake output line %d" % i, file=stream)
        stream.flush()

    write_stats(mode)

    if env.get("FAKE_KILL_SIGNAL"):
        os.kill(os.getpid(), int(env["FAKE_KILL_SIGNAL"]))
        time.sleep(5)
    if env.get("FAKE_FAIL_ON_RUN") and invocation == int(env["FAKE_FAIL_ON_RUN"]):
        return int(env.get("FAKE_FAIL_EXIT", "3"))
    code = env.get("FAKE_EXIT_B") if pool and env.get("FAKE_EXIT_B") else env.get("FAKE_EXIT", "0")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
