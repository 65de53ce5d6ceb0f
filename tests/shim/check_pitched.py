"""Pitched allocations under the shim, on the CUDA test double: each entry point
counted under its own name in the statistics (pool mode and observe mode), the
bytes of each block (pitch x rows) in the byte counts, and every block freed.

    python3 check_pitched.py SHIM PITCHED_PROBE
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import stats_schema  # noqa: E402

SHIM = PROBE = None
ENTRY_POINTS = {"cudaMallocPitch": "cudaMallocPitch", "cudaMalloc3D": "cudaMalloc3D",
                "cuMemAllocPitch": "cuMemAllocPitch_v2"}


def served(stdout):
    """The probe's allocations that held data, by entry point: (count, bytes)."""
    counts = {name: [0, 0] for name in ENTRY_POINTS.values()}
    for line in stdout.splitlines():
        m = re.match(r"(cudaMallocPitch|cudaMalloc3D|cuMemAllocPitch) (?:width )?(\d+)(?: height | x )(\d+)"
                     r"(?: x (\d+))?.*: (?:cudaSuccess|CUDA_SUCCESS) pitch ([1-9]\d*).* data ok", line)
        if not m:
            continue
        rows = int(m.group(3)) * (int(m.group(4)) if m.group(4) else 1)
        entry = counts[ENTRY_POINTS[m.group(1)]]
        entry[0] += 1
        entry[1] += int(m.group(5)) * rows
    return counts


def run(directory, **env):
    stats = os.path.join(directory, "stats.json")
    full = dict(os.environ, LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="0", ASYNCSHIM_STATS_FILE=stats, **env)
    out = subprocess.run([PROBE, "--quick", "--same-level"], env=full, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise AssertionError(f"pitched_probe exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return served(out.stdout), stats_schema.load_and_validate(stats)


class Pitched(unittest.TestCase):
    def check(self, **env):
        with tempfile.TemporaryDirectory() as d:
            counts, stats = run(d, **env)
            self.assertGreater(counts["cuMemAllocPitch_v2"][0], 10, "the probe's output was not understood")
            (dev,) = stats["devices"]
            for name, (count, _) in counts.items():
                self.assertEqual(dev["allocations_by_entry_point"][name], count, name)
                self.assertGreater(dev["time_in_calls_ns"][name], 0, name)
            self.assertEqual(dev["allocations_by_entry_point"]["cudaMalloc"], 0)
            self.assertEqual(dev["allocations"], sum(c for c, _ in counts.values()))
            self.assertEqual(dev["bytes_requested"], sum(b for _, b in counts.values()))
            self.assertEqual(dev["frees"], dev["allocations"])
            self.assertEqual(dev["bytes_in_use"], 0)

    def test_pool_mode_counts_each_entry_point(self):
        self.check()

    def test_observe_mode_counts_each_entry_point(self):
        self.check(ASYNCSHIM_MODE="observe")


if __name__ == "__main__":
    SHIM, PROBE = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    unittest.main()
