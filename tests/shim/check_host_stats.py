"""Pinned host memory under the shim, on the CUDA test double: the host pool's
blocks counted in the statistics' "host" object (by entry point, bytes, frees,
the write-combined request the native call answered), in the table at exit,
and none of them charged to a device; without ASYNCSHIM_HOST_POOL, all 0.

    python3 check_host_stats.py SHIM HOST_PROBE
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import stats_schema  # noqa: E402

SHIM = PROBE = None


def run(directory, **env):
    stats = os.path.join(directory, "stats.json")
    full = dict(os.environ, LD_PRELOAD=SHIM, ASYNCSHIM_STATS_FILE=stats, ASYNCSHIM_SHOW_STATS="1", **env)
    done = subprocess.run([PROBE, "--served-by-pool"], env=full, capture_output=True, text=True, timeout=60)
    return done, stats_schema.load_and_validate(stats)


class HostStatistics(unittest.TestCase):
    def test_the_host_pool_blocks_are_counted_by_entry_point(self):
        with tempfile.TemporaryDirectory() as directory:
            done, doc = run(directory, ASYNCSHIM_HOST_POOL="1")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        host = doc["host"]
        self.assertEqual(host["allocations_by_entry_point"],
                         {"cudaMallocHost": 1, "cudaHostAlloc": 1, "cuMemAllocHost_v2": 1, "cuMemHostAlloc": 1})
        self.assertEqual((host["allocations"], host["frees"], host["live_allocations"]), (4, 4, 0))
        self.assertEqual((host["bytes_requested"], host["peak_bytes_in_use"], host["bytes_in_use"]),
                         (4 * 4096, 4 * 4096, 0))
        self.assertEqual(host["passed_through"], 1)  # the write-combined block
        for device in doc["devices"]:  # pinned memory is no device's
            self.assertEqual(device["allocations"], 0, device)
        self.assertIn("pinned host memory from the host pool: 4 allocations, 4 frees", done.stderr)

    def test_without_the_host_pool_nothing_is_counted(self):
        with tempfile.TemporaryDirectory() as directory:
            done, doc = run(directory)
        self.assertNotEqual(done.returncode, 0)  # the probe sees native blocks
        self.assertEqual(doc["host"]["allocations"], 0)
        self.assertEqual(doc["host"]["passed_through"], 0)
        self.assertNotIn("pinned host memory", done.stderr)


if __name__ == "__main__":
    SHIM, PROBE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
