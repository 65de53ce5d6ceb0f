"""The leak report at exit (ASYNCSHIM_LEAK_REPORT, ASYNCSHIM_LEAK_REPORT_FILE)
checked against what stats_probe left allocated, under the CUDA test double:
its content and order, the cap on the log's list, several devices, observe
mode, a forked child, and a file that cannot be written.

    python3 check_leaks.py SHIM STATS_PROBE
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True

SHIM = PROBE = None


def run_probe(what, directory, **env):
    full = dict(os.environ, LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="64MiB", **env)
    for name in ("ASYNCSHIM_STATS_FILE", "ASYNCSHIM_SHOW_STATS", "ASYNCSHIM_LOG_LEVEL", "ASYNCSHIM_LOG_FILE"):
        full.pop(name, None)
    full.update(env)
    out = subprocess.run([PROBE, what], env=full, capture_output=True, text=True, check=False, cwd=directory)
    if out.returncode != 0:
        raise AssertionError(f"stats_probe {what} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    pids = {}
    same = []
    for line in out.stdout.splitlines():
        key, value = line.split()
        if key == "same":
            same.append(int(value, 16))
        else:
            pids[key] = int(value)
    return pids, same, out.stderr


def report_of(what, **env):
    """stats_probe `what` with the leak report in the log and a file: its pids, standard error and the file."""
    with tempfile.TemporaryDirectory() as d:
        pids, _, err = run_probe(what, d, ASYNCSHIM_LEAK_REPORT="1",
                                 ASYNCSHIM_LEAK_REPORT_FILE=os.path.join(d, "leaks-%p.json"), **env)
        with open(os.path.join(d, "leaks-%d.json" % pids["pid"])) as fh:
            return pids, err, json.load(fh)


def shim_lines(stderr):
    """The shim's messages, without their "asyncshim[pid]: level: " prefix."""
    return [re.sub(r"^asyncshim\[\d+\]: \w+: ", "", l) for l in stderr.splitlines() if l.startswith("asyncshim[")]


class LeakReport(unittest.TestCase):
    def test_the_log_lists_the_live_blocks_largest_first(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _, err = run_probe("basic", d, ASYNCSHIM_LEAK_REPORT="1")
        lines = shim_lines(err)
        summary = [l for l in lines if "leak report:" in l]
        self.assertEqual(len(summary), 1, err)
        self.assertIn("leak report: 2 blocks (8.8 KiB) still allocated at exit (device 0: 2 blocks, 8.8 KiB), "
                      "the largest first", summary[0])
        blocks = [l for l in lines if re.search(r" at 0x[0-9a-f]+ on device", l)]
        self.assertEqual(len(blocks), 2, err)
        self.assertRegex(blocks[0], r"4.9 KiB \(5000 B\) at 0x[0-9a-f]+ on device 0, from cudaMalloc in thread %d, "
                                    r"allocated \d+ ms before exit" % pids["pid"])
        self.assertRegex(blocks[1], r"3.9 KiB \(4000 B\) at 0x[0-9a-f]+ on device 0, from cudaMalloc")

    def test_the_file_has_every_block_and_the_log_at_most_twenty(self):
        with tempfile.TemporaryDirectory() as d:
            pids, same, err = run_probe("many", d, ASYNCSHIM_LEAK_REPORT="1",
                                        ASYNCSHIM_LEAK_REPORT_FILE=os.path.join(d, "leaks-%p.json"))
            with open(os.path.join(d, "leaks-%d.json" % pids["pid"])) as fh:
                report = json.load(fh)
        listed = [l for l in err.splitlines() if re.search(r" at 0x[0-9a-f]+ on device", l)]
        self.assertEqual(len(listed), 20, err)
        self.assertIn("5.5 KiB (5632 B) at", listed[0])
        # 22 + 3 blocks: 5 left out of the log, the two smallest distinct sizes and the three of 100 B.
        self.assertIn("  and 5 more blocks (1.0 KiB), not listed (ASYNCSHIM_LEAK_REPORT_FILE lists them all)",
                      shim_lines(err))
        self.assertEqual(report["pid"], pids["pid"])
        self.assertEqual(report["blocks_live"], 25)
        self.assertEqual(report["bytes_live"], sum(256 * (i + 1) for i in range(22)) + 300)
        self.assertEqual(report["untracked_allocations"], 0)
        self.assertEqual(report["blocks_left_out"], 0)
        sizes = [b["bytes"] for b in report["blocks"]]
        self.assertEqual(sizes, sorted(sizes, reverse=True))
        # Among blocks of one size, the oldest first.
        self.assertEqual([int(b["address"], 16) for b in report["blocks"][-3:]], same)
        ages = [b["age_s"] for b in report["blocks"][-3:]]
        self.assertEqual(ages, sorted(ages, reverse=True))
        self.assertGreater(ages[0] - ages[2], 0.003)
        for b in report["blocks"]:
            self.assertEqual((b["device"], b["entry_point"], b["thread"]), (0, "cudaMalloc", pids["pid"]))

    def test_call_stacks_at_the_depth_asked_without_the_shims_frames(self):
        _, err, report = report_of("basic", ASYNCSHIM_LEAK_STACK_DEPTH="3")
        lines = shim_lines(err)
        first = next(i for i, l in enumerate(lines) if "(5000 B) at" in l)
        frames = lines[first + 1:first + 4]
        self.assertEqual([f.split()[0] for f in frames], ["#0", "#1", "#2"], err)
        # The innermost frame is the program's own call into CUDA; none is the shim's.
        self.assertRegex(frames[0], r"#0 .*stats_probe")
        self.assertFalse(any("libasyncshim" in l for l in lines), err)
        self.assertIn("(4000 B) at", lines[first + 4])
        for b in report["blocks"]:
            self.assertEqual(len(b["stack"]), 3)
            self.assertIn("stats_probe", b["stack"][0])

    def test_per_device_totals(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("two-devices", d, ASYNCSHIM_LEAK_REPORT="yes", CUDA_DOUBLE_DEVICES="2")
        self.assertIn("leak report: 3 blocks (15.6 KiB) still allocated at exit (device 0: 2 blocks, 8.8 KiB; "
                      "device 1: 1 block, 6.8 KiB)", err)
        self.assertRegex(err, r"6.8 KiB \(7000 B\) at 0x[0-9a-f]+ on device 1, from cudaMalloc")

    def test_pinned_blocks_from_the_host_pool_are_listed_apart(self):
        pids, err, report = report_of("pinned", ASYNCSHIM_HOST_POOL="1")
        self.assertIn("leak report: 3 blocks (13.7 KiB) still allocated at exit (device 0: 2 blocks, 8.8 KiB; "
                      "pinned host memory: 1 block, 4.9 KiB)", err)
        self.assertRegex(err, r"4.9 KiB \(5000 B\) at 0x[0-9a-f]+ in pinned host memory, from cudaHostAlloc in "
                              r"thread %d" % pids["pid"])
        self.assertEqual(sorted(b["bytes"] for b in report["blocks"]), [4000, 5000, 5000])  # pinned and device
        pinned = [b for b in report["blocks"] if b["memory"] == "pinned"]
        self.assertEqual([(b["bytes"], b["device"], b["entry_point"]) for b in pinned], [(5000, None, "cudaHostAlloc")])
        self.assertEqual({(b["memory"], b["device"]) for b in report["blocks"] if b not in pinned}, {("device", 0)})

    def test_a_pinned_free_a_capture_refused_leaves_the_block_listed(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("pinned-captures", d, ASYNCSHIM_LEAK_REPORT="1", ASYNCSHIM_HOST_POOL="1")
        self.assertIn("leak report: 1 block (4.9 KiB) still allocated at exit (pinned host memory: 1 block, 4.9 KiB)",
                      err)
        self.assertRegex(err, r"\(5000 B\) at 0x[0-9a-f]+ in pinned host memory, from cudaMallocHost")

    def test_pinned_blocks_the_native_call_made_are_counted_not_listed(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("pinned", d, ASYNCSHIM_LEAK_REPORT="1", ASYNCSHIM_HOST_POOL="1")
        # The write-combined block: the native call's, counted.
        self.assertIn("still allocated at exit (device 0: 2 blocks, 8.8 KiB; pinned host memory: 1 block, 4.9 KiB), "
                      "the largest first; 1 allocation went to the native allocator and is not followed", err)
        self.assertNotIn("(700 B)", err)
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("pinned", d, ASYNCSHIM_LEAK_REPORT="1")  # the host pool off: nothing followed
        self.assertIn("leak report: 2 blocks (8.8 KiB) still allocated at exit (device 0: 2 blocks, 8.8 KiB), "
                      "the largest first\n", err)
        self.assertNotIn("pinned", err)

    def test_observe_mode_reports_too(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("basic", d, ASYNCSHIM_LEAK_REPORT="1", ASYNCSHIM_MODE="observe")
        self.assertIn("leak report: 2 blocks (8.8 KiB) still allocated at exit", err)

    def test_a_forked_child_makes_no_report(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _, err = run_probe("fork", d, ASYNCSHIM_LEAK_REPORT="1",
                                     ASYNCSHIM_LEAK_REPORT_FILE=os.path.join(d, "leaks-%p.json"))
            files = sorted(os.listdir(d))
        self.assertEqual(files, ["leaks-%d.json" % pids["pid"]])
        self.assertEqual(err.count("leak report:"), 1, err)

    def test_off_by_default_and_nothing_to_report(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("basic", d)
            self.assertNotIn("leak report", err)
            _, _, err = run_probe("threads", d, ASYNCSHIM_LEAK_REPORT="1")  # everything freed
        self.assertIn("leak report: no block is still allocated at exit", err)

    def test_blocks_a_global_objects_destructor_frees_are_not_leaks(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("global-free", d, ASYNCSHIM_LEAK_REPORT="1")
        self.assertIn("leak report: 1 block (777 B) still allocated at exit", err)

    def test_a_device_reset_frees_its_blocks(self):
        # Pool mode follows resets (observe mode follows no driver call).
        with tempfile.TemporaryDirectory() as d:
            _, _, err = run_probe("reset", d, ASYNCSHIM_LEAK_REPORT="1")
        self.assertIn("leak report: 1 block (2.9 KiB) still allocated at exit", err)
        self.assertRegex(err, r"\(3000 B\) at 0x[0-9a-f]+ on device 0")

    def test_an_unwritable_file_is_said_and_the_program_is_unaffected(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "missing", "leaks.json")
            _, _, err = run_probe("basic", d, ASYNCSHIM_LEAK_REPORT_FILE=path)
        self.assertIn("ASYNCSHIM_LEAK_REPORT_FILE: the leak report is not written to '%s': " % path, err)
        self.assertNotIn("leak report: 2 blocks", err)  # the log's report was not asked for


if __name__ == "__main__":
    SHIM, PROBE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
