"""The shim's statistics (ASYNCSHIM_STATS_FILE, ASYNCSHIM_SHOW_STATS, observe
mode) checked against what stats_probe did, under the CUDA test double.

    python3 check_stats.py SHIM STATS_PROBE
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

# What stats_probe's "basic" does (see stats_probe.cpp).
SIZES = [1000, 2000, 3000, 4000, 5000]
LIVE = SIZES[3:]


def run_probe(what, directory, **env):
    full = dict(os.environ, LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="64MiB", **env)
    full.setdefault("ASYNCSHIM_STATS_FILE", os.path.join(directory, "stats-%p.json"))
    out = subprocess.run([PROBE, what], env=full, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise AssertionError(f"stats_probe {what} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    pids = {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines()}
    return pids, out.stderr


def load(path):
    # Every statistics file the tests read also matches docs/statistics.schema.json.
    return stats_schema.load_and_validate(path)


class PoolMode(unittest.TestCase):
    def test_counts_match_what_the_program_did(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("basic", d)
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        self.assertEqual(stats["format"], "asyncshim-stats")
        self.assertEqual(stats["format_version"], 1)
        self.assertIsInstance(stats["shim_version"], str)
        self.assertEqual(stats["pid"], pids["pid"])
        self.assertEqual(stats["mode"], "pool")
        self.assertEqual(stats["settings"]["initial_pool_size"], "64MiB")
        self.assertIsNone(stats["settings"]["release_threshold"])
        self.assertEqual(stats["settings"]["ordering"], "device")
        self.assertEqual(len(stats["devices"]), 1)
        dev = stats["devices"][0]
        self.assertEqual(dev["device"], 0)
        self.assertEqual(dev["allocations"], 5)
        self.assertEqual(dev["frees"], 3)
        self.assertEqual(dev["bytes_requested"], sum(SIZES))
        self.assertEqual(dev["bytes_in_use"], sum(LIVE))
        self.assertEqual(dev["peak_bytes_in_use"], sum(SIZES))
        self.assertEqual(dev["live_allocations"], 2)
        self.assertGreaterEqual(dev["pool_reserved_high_water"], 64 << 20)
        self.assertEqual(dev["failed_allocations"], 1)
        self.assertEqual(dev["passed_through"]["total"], 0)
        self.assertGreater(dev["time_in_calls_ns"]["cudaMalloc"], 0)
        self.assertGreater(dev["time_in_calls_ns"]["cudaFree"], 0)
        other = stats["unattributed"]
        self.assertEqual(other["allocations_passed_through"], 1)  # the zero-size one
        self.assertEqual(other["failed_allocations"], 0)
        self.assertEqual(other["frees_passed_through"], 2)  # nullptr and the foreign pointer

    def test_the_out_of_memory_report_is_kept_whole(self):
        # basic's one failure (1 PiB): its report, with the driver's NVML (the
        # double) naming this process and the largest blocks with their stacks.
        nvml = os.environ.get("NVML_DOUBLE_DIR")
        if not nvml:
            self.skipTest("NVML_DOUBLE_DIR (the NVML double's folder) is not set")
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("basic", d, LD_LIBRARY_PATH=nvml, ASYNCSHIM_LEAK_STACK_DEPTH="2")
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        reports = stats["out_of_memory_reports"]
        self.assertEqual(len(reports), 1, reports)
        r = reports[0]
        self.assertEqual((r["entry_point"], r["bytes"], r["device"], r["limit"]), ("cudaMalloc", 1 << 50, 0, None))
        self.assertGreaterEqual(r["pool_reserved"], r["pool_used"])
        self.assertGreater(r["device_total"], 0)
        self.assertEqual([b["bytes"] for b in r["largest_blocks"]], [5000, 4000])
        self.assertTrue(all(b["stack"] and b["entry_point"] == "cudaMalloc" for b in r["largest_blocks"]))
        self.assertEqual(len(r["processes"]), 1, r["processes"])
        me = r["processes"][0]
        self.assertEqual((me["pid"], me["name"], me["this_process"]), (pids["pid"], "stats_probe", True))
        self.assertGreaterEqual(me["bytes"], 9000)  # its live blocks (the recovery trimmed the rest)

    def test_without_the_driver_s_nvml_the_processes_are_unknown(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("basic", d)
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        self.assertEqual(len(stats["out_of_memory_reports"]), 1)
        self.assertIsNone(stats["out_of_memory_reports"][0]["processes"])
        self.assertEqual(stats["out_of_memory_reports"][0]["largest_blocks"], [])

    def test_devices_are_reported_separately(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("two-devices", d, CUDA_DOUBLE_DEVICES="2")
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        by_device = {dev["device"]: dev for dev in stats["devices"]}
        self.assertEqual(sorted(by_device), [0, 1])
        self.assertEqual(by_device[1]["allocations"], 1)
        self.assertEqual(by_device[1]["bytes_in_use"], 7000)
        self.assertEqual(by_device[0]["allocations"], 5)

    def test_show_stats_prints_a_table(self):
        with tempfile.TemporaryDirectory() as d:
            _, err = run_probe("basic", d, ASYNCSHIM_SHOW_STATS="1", ASYNCSHIM_STATS_FILE="")
            files = os.listdir(d)
        self.assertEqual(files, [])  # an empty ASYNCSHIM_STATS_FILE writes nothing
        self.assertIn("info: statistics (mode pool):", err)
        self.assertRegex(err, r"info:\s+0\s+5\s+3\s")
        self.assertIn("frees of memory the shim did not allocate (passed to the native cudaFree): 2", err)

    def test_unwritable_path_is_reported(self):
        with tempfile.TemporaryDirectory() as d:
            _, err = run_probe("basic", d, ASYNCSHIM_STATS_FILE=os.path.join(d, "missing", "s.json"))
        self.assertIn("error: ASYNCSHIM_STATS_FILE: cannot write the statistics to", err)


class FreeBacklog(unittest.TestCase):
    # stats_probe "threads": 8 threads, 2000 pairs each of 256 .. 2048 bytes.
    def test_frees_beyond_the_backlog_are_counted(self):
        with tempfile.TemporaryDirectory() as d:
            pids, err = run_probe("threads", d, ASYNCSHIM_FREE_BACKLOG="4KiB", ASYNCSHIM_IN_ORDER_FREES="off",
                                  ASYNCSHIM_SHOW_STATS="1")
            backlog = load(os.path.join(d, f"stats-{pids['pid']}.json"))["devices"][0]["free_backlog"]
        self.assertGreater(backlog["frees_over_limit"], 0)
        self.assertLessEqual(backlog["frees_over_limit"], 16000)
        self.assertGreater(backlog["peak_bytes"], 4096)
        # The double completes every event at once: nothing is ever waited for.
        self.assertEqual((backlog["frees_waited"], backlog["waited_ns"]), (0, 0))
        self.assertRegex(err, r"device 0 free backlog: at most [0-9.]+ [KM]?i?B freed memory waited for the device; "
                              r"[0-9]+ frees found more than the limit waiting, 0 of them waited for the device")

    def test_without_a_limit_nothing_is_held_back(self):
        with tempfile.TemporaryDirectory() as d:
            pids, err = run_probe("threads", d, ASYNCSHIM_SHOW_STATS="1")
            backlog = load(os.path.join(d, f"stats-{pids['pid']}.json"))["devices"][0]["free_backlog"]
        self.assertEqual(backlog, {"frees_over_limit": 0, "frees_waited": 0, "waited_ns": 0, "peak_bytes": 0})
        self.assertNotIn("free backlog", err)


class InOrderFrees(unittest.TestCase):
    # stats_probe "threads" makes no non-blocking stream: every free goes in order, unless that is off.
    def test_frees_made_in_order_are_counted(self):
        with tempfile.TemporaryDirectory() as d:
            pids, err = run_probe("threads", d, ASYNCSHIM_SHOW_STATS="1")
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
            device = stats["devices"][0]
        self.assertIs(stats["submissions_followed"], True)
        self.assertEqual(device["frees"], 16000)
        self.assertEqual(device["in_order_frees"], 16000)
        self.assertIn("device 0: 16000 of 16000 frees went to the pool at once in the legacy stream's order", err)

    def test_a_runtime_that_submits_past_the_shim_ends_followed_submissions(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("threads", d, CUDA_DOUBLE_RUNTIME_PRIVATE_SUBMISSIONS="1")
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        self.assertIs(stats["submissions_followed"], False)
        # No non-blocking stream: the frees go in order all the same.
        self.assertEqual(stats["devices"][0]["in_order_frees"], 16000)

    def test_none_with_them_off(self):
        with tempfile.TemporaryDirectory() as d:
            pids, err = run_probe("threads", d, ASYNCSHIM_IN_ORDER_FREES="off", ASYNCSHIM_SHOW_STATS="1")
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
            device = stats["devices"][0]
        self.assertIs(stats["submissions_followed"], False)
        self.assertEqual((device["frees"], device["in_order_frees"]), (16000, 0))
        self.assertNotIn("legacy stream's order", err)


class ObserveMode(unittest.TestCase):
    def test_same_counts_native_memory(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("basic", d, ASYNCSHIM_MODE="observe")
            stats = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        self.assertEqual(stats["mode"], "observe")
        dev = stats["devices"][0]
        self.assertEqual((dev["allocations"], dev["frees"]), (5, 3))
        self.assertEqual(dev["bytes_in_use"], sum(LIVE))
        self.assertEqual(dev["peak_bytes_in_use"], sum(SIZES))
        self.assertEqual(dev["failed_allocations"], 1)
        self.assertIsNone(dev["pool_reserved_high_water"])  # no pool in observe mode
        self.assertEqual(stats["unattributed"]["frees_passed_through"], 2)


class Fork(unittest.TestCase):
    # A forked child passes everything to the native allocator (stats_probe
    # checks its memory is native) and reports nothing.
    def test_only_the_parent_reports(self):
        with tempfile.TemporaryDirectory() as d:
            pids, err = run_probe("fork", d, ASYNCSHIM_SHOW_STATS="1")
            files = sorted(os.listdir(d))
            parent = load(os.path.join(d, f"stats-{pids['pid']}.json"))
        self.assertEqual(files, [f"stats-{pids['pid']}.json"])
        self.assertEqual(parent["devices"][0]["allocations"], 5)
        self.assertEqual(err.count("statistics (mode pool)"), 1, err)

    def test_child_does_not_overwrite_a_fixed_path(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "stats.json")
            pids, _ = run_probe("fork", d, ASYNCSHIM_STATS_FILE=path)
            stats = load(path)
        self.assertEqual(stats["pid"], pids["pid"])
        self.assertEqual(stats["devices"][0]["allocations"], 5)


class Disabled(unittest.TestCase):
    def test_disabled_shim_keeps_no_statistics(self):
        with tempfile.TemporaryDirectory() as d:
            run_probe("basic", d, ASYNCSHIM_DISABLE="1", ASYNCSHIM_SHOW_STATS="1")
            files = os.listdir(d)
        self.assertEqual(files, [], "a disabled shim touches nothing, statistics included")


if __name__ == "__main__":
    SHIM, PROBE = sys.argv[1], sys.argv[2]
    print(f"statistics schema validator: {stats_schema.validator_name()}")
    unittest.main(argv=sys.argv[:1], verbosity=2)
