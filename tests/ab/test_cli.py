#!/usr/bin/env python3
"""asyncshim-ab end to end: the wrapper runs tests/ab/fake_program.py (no real
shim, no GPU needed) and its report, exports and exit statuses are checked."""

import csv
import os
import re
import shlex
import subprocess
import sys
import textwrap
import unittest

sys.dont_write_bytecode = True  # no __pycache__ next to scripts/asyncshim-ab
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support  # noqa: E402
from ab_support import AbTestCase  # noqa: E402

GIB = 1 << 30
NO_STATS_PROBLEM = ("the shim wrote no statistics in any run: it did not load into the program, "
                    "or the program made no cudaMalloc/cudaFree through it (no GPU?)")
# One process of the fake program (see fake_program.py).
FAKE_ALLOCATIONS = 15
FAKE_PEAK = 8000
FAKE_TIME_NS = {"pool": 1800100, "observe": 4200100}


class ReportAndExports(AbTestCase):
    def test_report_exports_and_interleaving(self):
        proc = self.run_ab(["--runs", "4", "--warmup", "1",
                            "--export-json", "r.json", "--export-markdown", "r.md",
                            "--export-csv", "r.csv"],
                           env={"FAKE_SLEEP_MS": "60", "FAKE_SLEEP_MS_B": "0"})
        self.assertExit(proc, 0)
        out = proc.stdout
        # hyperfine-like blocks
        self.assertIn("Benchmark 1: without asyncshim (observe)\n", out)
        self.assertIn("Benchmark 2: with asyncshim\n", out)
        self.assertRegex(out, r"  Time \(mean \u00b1 \u03c3\): +[\d.]+ ms \u00b1 +[\d.]+ ms    "
                              r"\[User: [\d.]+ ms, System: [\d.]+ ms\]")
        self.assertRegex(out, r"  Time \(median\): +[\d.]+ ms")
        self.assertRegex(out, r"  Range \(min \u2026 max\): +[\d.]+ ms \u2026 [\d.]+ ms    4 runs")
        self.assertRegex(out, r"  Peak RSS \(median\): +[\d.]+ MiB")
        self.assertIn("GPU (median/run):        15 allocations, peak in use 7.8 KiB (sum of "
                      "per-device peaks), pool reserved high-water \u2014, 1 failed, 4.2 ms in "
                      "cudaMalloc/cudaFree", out)
        self.assertIn("pool reserved high-water 3.0 GiB, 1 failed, 1.8 ms in cudaMalloc/cudaFree", out)
        self.assertRegex(out, r"Summary\n  with asyncshim ran\n    [\d.]+ \u00b1 [\d.]+ times faster "
                              r"than without asyncshim \(observe\)\n")
        self.assertRegex(out, r"  Mann-Whitney U test: p = [\d.e+-]+ \(two-sided, 4 vs 4 runs\): "
                              r"the difference is (not )?significant at the 5% level\.")
        self.assertRegex(out, r"  95% bootstrap interval of the ratio of medians: [\d.]+ \u2026 [\d.]+")
        self.assertNotIn("Warning", proc.stderr)

        # A and B alternate, warm-up first; LD_PRELOAD and the stats file names
        calls = self.invocations()
        self.assertEqual([c["mode"] for c in calls], ["observe", "pool"] * 5)
        self.assertTrue(all(c["ld_preload"] == self.shim for c in calls))
        self.assertRegex(calls[0]["stats_file"], r"/a-warmup1-%p\.json$")
        self.assertRegex(calls[2]["stats_file"], r"/a-1-%p\.json$")
        self.assertRegex(calls[3]["stats_file"], r"/b-1-%p\.json$")
        self.assertRegex(calls[9]["stats_file"], r"/b-4-%p\.json$")

        # JSON
        data = self.read_json("r.json")
        self.assertEqual(set(data), {"results", "comparisons", "shim", "program",
                                     "peak_rss_floor_kib", "asyncshim_ab_version"})
        self.assertIsInstance(data["peak_rss_floor_kib"], int)
        self.assertEqual(data["shim"], self.shim)
        self.assertEqual(data["program"], ab_support.FAKE_PROGRAM)
        a, b = data["results"]
        # Named by command, as hyperfine does: the variables the arm adds, then the program.
        program = " ".join(shlex.quote(w) for w in ab_support.FAKE_PROGRAM)
        command_a = "LD_PRELOAD=%s ASYNCSHIM_MODE=observe %s" % (shlex.quote(self.shim), program)
        command_b = "LD_PRELOAD=%s ASYNCSHIM_MODE=pool %s" % (shlex.quote(self.shim), program)
        self.assertEqual((a["command"], a["name"], a["arm"]), (command_a, "without asyncshim (observe)", "A"))
        self.assertEqual((b["command"], b["name"], b["arm"]), (command_b, "with asyncshim", "B"))
        self.assertEqual(a["env"], {"LD_PRELOAD": self.shim, "ASYNCSHIM_MODE": "observe"})
        self.assertEqual(b["env"], {"LD_PRELOAD": self.shim, "ASYNCSHIM_MODE": "pool"})
        for r in (a, b):
            for key in ("mean", "stddev", "median", "user", "system", "min", "max"):
                self.assertIsInstance(r[key], float, key)
            self.assertEqual(len(r["times"]), 4)
            self.assertTrue(all(isinstance(t, float) and 0 < t < 10 for t in r["times"]))
            self.assertLessEqual(r["min"], r["median"])
            self.assertLessEqual(r["median"], r["max"])
            self.assertEqual(r["exit_codes"], [0] * 4)
            self.assertTrue(all(isinstance(k, int) and k > 0 for k in r["peak_rss_kib"]))
            self.assertEqual(r["gpu"]["allocations"], [FAKE_ALLOCATIONS] * 4)
            self.assertEqual(r["gpu"]["peak_bytes_in_use"], [FAKE_PEAK] * 4)
            self.assertEqual(r["gpu"]["failed_allocations"], [1] * 4)
        self.assertGreater(a["mean"], 0.055)  # slept 60 ms
        self.assertEqual(a["gpu"]["pool_reserved_high_water"], [None] * 4)
        self.assertEqual(b["gpu"]["pool_reserved_high_water"], [3 * GIB] * 4)
        self.assertEqual(a["gpu"]["time_in_calls_ns"], [FAKE_TIME_NS["observe"]] * 4)
        self.assertEqual(b["gpu"]["time_in_calls_ns"], [FAKE_TIME_NS["pool"]] * 4)
        (comp,) = data["comparisons"]
        self.assertEqual(comp["baseline"], command_a)
        self.assertEqual(comp["candidate"], command_b)
        self.assertIs(comp["faster"], True)
        self.assertIsInstance(comp["ratio"], float)
        self.assertIsInstance(comp["ratio_stddev"], float)
        self.assertAlmostEqual(comp["ratio"], a["mean"] / b["mean"], places=9)
        self.assertIsInstance(comp["mann_whitney_p"], float)
        self.assertIsInstance(comp["significant"], bool)
        self.assertEqual(len(comp["bootstrap_interval"]), 2)
        self.assertTrue(all(isinstance(x, float) for x in comp["bootstrap_interval"]))

        # Markdown
        with open(self.path("r.md")) as fh:
            md = fh.read().splitlines()
        self.assertEqual(md[0], "| Command | Mean [ms] | Min [ms] | Max [ms] | Relative |")
        self.assertEqual(md[1], "|:---|---:|---:|---:|---:|")
        self.assertRegex(md[2], r"^\| `" + re.escape(command_a) + r"` \| [\d.]+ \u00b1 [\d.]+ \| "
                                r"[\d.]+ \| [\d.]+ \| [\d.]+ \u00b1 [\d.]+ \|$")
        self.assertRegex(md[3], r"^\| `" + re.escape(command_b) + r"` \| [\d.]+ \u00b1 [\d.]+ \| [\d.]+ \| [\d.]+ "
                                r"\| 1\.00 \|$")
        gpu_header = md.index("| Command | Allocations | Peak in use | Pool reserved high-water | "
                              "Failed allocations | Time in cudaMalloc/cudaFree |")
        self.assertEqual(md[gpu_header + 2],
                         "| `%s` | 15 | 7.8 KiB | \u2014 | 1 | 4.2 ms |" % command_a)
        self.assertEqual(md[gpu_header + 3], "| `%s` | 15 | 7.8 KiB | 3.0 GiB | 1 | 1.8 ms |" % command_b)

        # CSV
        with open(self.path("r.csv"), newline="") as fh:
            text = fh.read()
        self.assertTrue(text.startswith(
            "command,mean,stddev,median,user,system,min,max,peak_rss_kib,allocations,"
            "peak_bytes_in_use,pool_reserved_high_water\r\n"))
        rows = list(csv.DictReader(text.splitlines()))
        self.assertEqual([r["command"] for r in rows], [command_a, command_b])
        self.assertAlmostEqual(float(rows[0]["mean"]), a["mean"], places=9)
        self.assertEqual(rows[0]["allocations"], "15")
        self.assertEqual(rows[0]["peak_bytes_in_use"], "8000")
        self.assertEqual(rows[0]["pool_reserved_high_water"], "")
        self.assertEqual(rows[1]["pool_reserved_high_water"], str(3 * GIB))

    def test_several_configs_are_several_b_arms_interleaved(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "0", "--export-json", "r.json",
                            "--config", "FAKE_TAG=fast FAKE_SLEEP_MS_B=0",
                            "--config", "FAKE_TAG=slow FAKE_SLEEP_MS_B=150"],
                           env={"FAKE_SLEEP_MS": "50"})
        self.assertExit(proc, 0)
        out = proc.stdout
        self.assertIn("Benchmark 1: without asyncshim (observe)\n", out)
        self.assertIn("Benchmark 2: with asyncshim (FAKE_TAG=fast FAKE_SLEEP_MS_B=0)\n", out)
        self.assertIn("Benchmark 3: with asyncshim (FAKE_TAG=slow FAKE_SLEEP_MS_B=150)\n", out)
        self.assertRegex(out, r"  with asyncshim \(FAKE_TAG=fast FAKE_SLEEP_MS_B=0\) ran\n"
                              r"    [\d.]+ \u00b1 [\d.]+ times faster than without asyncshim \(observe\)\n")
        self.assertRegex(out, r"  with asyncshim \(FAKE_TAG=slow FAKE_SLEEP_MS_B=150\) ran\n"
                              r"    [\d.]+ \u00b1 [\d.]+ times slower than without asyncshim \(observe\)\n")
        self.assertEqual(out.count("Mann-Whitney U test: p = "), 2)
        calls = self.invocations()
        self.assertEqual([c["tag"] for c in calls], [None, "fast", "slow"] * 3)
        self.assertEqual([c["mode"] for c in calls], ["observe", "pool", "pool"] * 3)
        self.assertRegex(calls[1]["stats_file"], r"/b1-1-%p\.json$")
        self.assertRegex(calls[8]["stats_file"], r"/b2-3-%p\.json$")
        data = self.read_json("r.json")
        self.assertEqual([r["arm"] for r in data["results"]], ["A", "B", "B"])
        self.assertEqual(data["results"][2]["env"],
                         {"LD_PRELOAD": self.shim, "ASYNCSHIM_MODE": "pool",
                          "FAKE_TAG": "slow", "FAKE_SLEEP_MS_B": "150"})
        fast, slow = data["comparisons"]
        self.assertIs(fast["faster"], True)
        self.assertIs(slow["faster"], False)
        self.assertGreater(slow["ratio"], 1.0)
        self.assertLess(slow["speedup"], 1.0)

    def test_statistics_of_every_process_of_a_run_are_added(self):
        proc = self.run_ab(["--runs", "2", "--warmup", "0", "--export-json", "r.json"],
                           env={"FAKE_CHILDREN": "2"})
        self.assertExit(proc, 0)
        data = self.read_json("r.json")
        for r in data["results"]:
            self.assertEqual(r["gpu"]["allocations"], [3 * FAKE_ALLOCATIONS] * 2)
        self.assertIn("45 allocations", proc.stdout)
        self.assertIn("significance cannot be judged with fewer than 3 runs per arm (2 vs 2 runs)",
                      proc.stdout)

    def test_existing_ld_preload_is_kept_after_the_shim(self):
        other = ab_support.loaded_library(r"^libc\.so") or self.shim
        proc = self.run_ab(["--runs", "1", "--warmup", "0"], env={"LD_PRELOAD": other})
        self.assertExit(proc, 0)
        self.assertEqual([c["ld_preload"] for c in self.invocations()],
                         [self.shim + ":" + other] * 2)
        self.assertIn("Time (abs \u2261):", proc.stdout)

    def test_shim_from_the_environment_is_not_passed_on(self):
        proc = self.run_ab(["--runs", "1", "--warmup", "0", "--export-json", "r.json"],
                           env={"ASYNCSHIM_LIBRARY": self.shim}, shim=False)
        self.assertExit(proc, 0)
        self.assertEqual(self.read_json("r.json")["shim"], self.shim)
        # the shim would warn about an unknown ASYNCSHIM_LIBRARY
        self.assertEqual([c["asyncshim_variables"] for c in self.invocations()],
                         [["ASYNCSHIM_MODE", "ASYNCSHIM_STATS_FILE"]] * 2)
        self.assertEqual([c["ld_preload"] for c in self.invocations()], [self.shim] * 2)

    def test_runs_are_chosen_from_min_time(self):
        # each run takes well over 5 ms, so --min-time 0.01 asks for the minimum of 10
        for warmup in ("0", "1"):  # from the first round, or from the warm-up runs
            proc = self.run_ab(["--min-time", "0.01", "--warmup", warmup, "--export-json", "r.json"])
            self.assertExit(proc, 0)
            data = self.read_json("r.json")
            self.assertEqual([len(r["times"]) for r in data["results"]], [10, 10])
            self.assertIn("10 runs", proc.stdout)
        self.assertEqual(len(self.invocations()), 20 + 22)

    def test_show_output_and_stats_dir(self):
        os.mkdir(self.path("keep"))
        proc = self.run_ab(["--runs", "1", "--warmup", "0", "--show-output", "--stats-dir", "keep"],
                           env={"FAKE_OUTPUT_LINES": "2"})
        self.assertExit(proc, 0)
        self.assertEqual(proc.stdout.count("fake output line 1\n"), 2)
        self.assertEqual(proc.stderr.count("fake output line 2\n"), 2)
        (kept,) = os.listdir(self.path("keep"))
        names = sorted(os.listdir(self.path(os.path.join("keep", kept))))
        self.assertEqual(len(names), 2)
        self.assertRegex(names[0], r"^a-1-\d+\.json$")
        self.assertRegex(names[1], r"^b-1-\d+\.json$")
        self.assertIn("Statistics files kept in", proc.stderr)


class Baselines(AbTestCase):
    def test_native_baseline_has_no_shim_and_no_gpu_figures(self):
        proc = self.run_ab(["--baseline", "native", "--runs", "3", "--warmup", "0",
                            "--export-json", "r.json", "--export-markdown", "r.md"])
        self.assertExit(proc, 0)
        self.assertIn("Benchmark 1: without asyncshim (native)\n", proc.stdout)
        self.assertIn("  GPU:              no figures (no shim in this arm)\n", proc.stdout)
        self.assertRegex(proc.stdout, r"times (faster|slower) than without asyncshim \(native\)\n")
        self.assertNotIn("no result", proc.stdout + proc.stderr)
        calls = self.invocations()
        self.assertEqual([c["mode"] for c in calls], ["", "pool"] * 3)
        self.assertEqual([c["ld_preload"] for c in calls], [None, self.shim] * 3)
        self.assertIsNone(calls[0]["stats_file"])
        data = self.read_json("r.json")
        a, b = data["results"]
        self.assertEqual(a["env"], {})
        self.assertIsNone(a["gpu"])
        self.assertEqual(b["gpu"]["allocations"], [FAKE_ALLOCATIONS] * 3)
        with open(self.path("r.md")) as fh:
            # the native arm adds no variable: its command is the program alone
            program = " ".join(shlex.quote(w) for w in ab_support.FAKE_PROGRAM)
            self.assertIn("| `%s` | \u2014 | \u2014 | \u2014 | \u2014 | \u2014 |" % program, fh.read())
        self.assertEqual(a["command"], program)

    def assertNoResult(self, proc, why):
        """Exit status 3: the B arm's times are reported, but not as a comparison."""
        self.assertExit(proc, 3)
        self.assertIn("asyncshim-ab: error: arm 'with asyncshim' has no result: " + why, proc.stderr)
        self.assertIn("  with asyncshim: no result: " + why, proc.stdout)
        self.assertNotIn("times faster", proc.stdout)
        self.assertNotIn("times slower", proc.stdout)

    def test_no_statistics_is_no_result(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "1", "--export-json", "r.json"],
                           env={"FAKE_NO_STATS": "1"})
        self.assertNoResult(proc, NO_STATS_PROBLEM)
        self.assertEqual(proc.stdout.count("  GPU:              no statistics were written\n"), 2)
        data = self.read_json("r.json")
        self.assertEqual([r["gpu"] for r in data["results"]], [None, None])
        self.assertEqual([r["problem"] for r in data["results"]], [None, NO_STATS_PROBLEM])

    def test_no_statistics_from_b_only(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "0"], env={"FAKE_NO_STATS_B": "1"})
        self.assertNoResult(proc, NO_STATS_PROBLEM)
        self.assertIn("GPU (median/run):        15 allocations", proc.stdout)  # arm A's

    def test_statistics_from_b_only_is_a_result(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "0", "--baseline", "native"])
        self.assertExit(proc, 0)
        self.assertIn("times", proc.stdout)
        self.assertNotIn("no result", proc.stdout)

    def test_program_that_makes_no_cuda_calls(self):
        # a real program, not the fake: no statistics, and a peak RSS at the floor
        proc = self.run_ab(["--runs", "3", "--warmup", "0"], program=["true"])
        self.assertNoResult(proc, NO_STATS_PROBLEM)
        self.assertEqual(proc.stdout.count("(at most: the kernel counts "), 2, proc.stdout)

    def test_newer_statistics_format_is_ignored_with_a_warning(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "0"], env={"FAKE_STATS_VERSION": "2"})
        self.assertNoResult(proc, NO_STATS_PROBLEM)
        self.assertEqual(proc.stderr.count("format_version 2 is newer than this asyncshim-ab "
                                           "understands (1)"), 1, proc.stderr)

    def test_foreign_statistics_format_is_ignored_with_a_warning(self):
        proc = self.run_ab(["--runs", "1", "--warmup", "0"], env={"FAKE_STATS_FORMAT": "other"})
        self.assertNoResult(proc, NO_STATS_PROBLEM)
        self.assertIn("\"format\" is 'other', not 'asyncshim-stats'", proc.stderr)

    def test_mode_other_than_requested_is_no_result(self):
        proc = self.run_ab(["--runs", "1", "--warmup", "0"], env={"FAKE_STATS_MODE": "disabled"})
        self.assertNoResult(proc, "the shim ran in mode 'disabled', not 'pool'")
        self.assertIn("Warning: in arm 'without asyncshim (observe)' the shim reported mode "
                      "'disabled', not 'observe'", proc.stderr)


class Failures(AbTestCase):
    def test_failing_run_stops_with_status_1_and_the_tail_of_its_output(self):
        # invocations: 1 = A run 1, 2 = B run 1, 3 = A run 2, 4 = B run 2
        proc = self.run_ab(["--runs", "3", "--warmup", "0", "--export-json", "r.json"],
                           env={"FAKE_FAIL_ON_RUN": "4", "FAKE_OUTPUT_LINES": "30"})
        self.assertExit(proc, 1)
        self.assertIn("Error: with asyncshim run 2 exited with status 3\n", proc.stderr)
        lines = proc.stderr.splitlines()
        self.assertIn("Last 20 lines of its output:", lines)
        self.assertIn("  fake output line 30", lines)
        self.assertIn("  fake output line 11", lines)
        self.assertNotIn("  fake output line 10", lines)
        self.assertEqual(len(self.invocations()), 4)
        self.assertEqual(proc.stdout, "")
        self.assertFalse(os.path.exists(self.path("r.json")))

    def test_killed_warmup_run(self):
        proc = self.run_ab(["--runs", "3"], env={"FAKE_KILL_SIGNAL": "9"})
        self.assertExit(proc, 1)
        self.assertIn("Error: without asyncshim (observe) warm-up run 1 was killed by signal 9 "
                      "(SIGKILL)", proc.stderr)
        self.assertEqual(len(self.invocations()), 1)

    def test_ignore_failure_records_and_goes_on(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "1", "--ignore-failure",
                            "--export-json", "r.json", "--export-csv", "r.csv"],
                           env={"FAKE_EXIT_B": "5"})
        self.assertExit(proc, 0)
        self.assertIn("  Warning: 3 of 3 runs failed (exited with status 5, exited with status 5, "
                      "exited with status 5); their times are included above.", proc.stdout)
        data = self.read_json("r.json")
        self.assertEqual(data["results"][0]["exit_codes"], [0, 0, 0])
        self.assertEqual(data["results"][1]["exit_codes"], [5, 5, 5])
        self.assertEqual(len(self.invocations()), 8)

    def test_ignore_failure_with_a_signal(self):
        proc = self.run_ab(["--runs", "2", "--warmup", "0", "-i", "--export-json", "r.json"],
                           env={"FAKE_KILL_SIGNAL": "15"})
        self.assertExit(proc, 0)
        self.assertIn("was killed by signal 15 (SIGTERM)", proc.stdout)
        self.assertEqual(self.read_json("r.json")["results"][1]["exit_codes"], [-15, -15])


class CommandLine(AbTestCase):
    def assertUsageError(self, options, *fragments, **kw):
        proc = self.run_ab(options, **kw)
        self.assertExit(proc, 2)
        for fragment in fragments:
            self.assertIn(fragment, proc.stderr)
        self.assertEqual(self.invocations(), [])
        return proc

    def test_bad_options_exit_2_naming_option_and_value(self):
        self.assertUsageError(["--runs", "0"], "argument -r/--runs", "'0'")
        self.assertUsageError(["--runs", "many"], "argument -r/--runs", "'many'")
        self.assertUsageError(["--warmup", "-1"], "argument -w/--warmup", "'-1'")
        self.assertUsageError(["--min-time", "0"], "argument --min-time", "'0'")
        self.assertUsageError(["--min-time", "soon"], "argument --min-time", "'soon'")
        self.assertUsageError(["--baseline", "nothing"], "argument --baseline", "'nothing'")
        self.assertUsageError(["--config", "nonsense"], "argument --config", "'nonsense'")
        self.assertUsageError(["--config", "LD_PRELOAD=/x.so"], "argument --config",
                              "LD_PRELOAD is set by asyncshim-ab itself")
        self.assertUsageError(["--export-json", "/nonexistent/dir/r.json"], "argument --export-json",
                              "/nonexistent/dir")
        self.assertUsageError(["--stats-dir", "/nonexistent/dir"], "argument --stats-dir")
        self.assertUsageError(["--frobnicate"], "--frobnicate")
        self.assertUsageError(["--runs", "3"], "no program given", program=False)

    def test_config_values_are_checked_with_the_shims_rules(self):
        build = os.environ.get("AB_TEST_BUILD_DIR")
        if not build:
            self.skipTest("AB_TEST_BUILD_DIR is not set (ctest sets it): no asyncshim-settings to check with")
        script = os.path.join(build, "bin", "asyncshim-ab")

        def run(config):
            argv = [sys.executable, script, "--shim", self.shim, "--runs", "1", "--warmup", "0", "--config", config,
                    "--"] + ab_support.FAKE_PROGRAM
            return subprocess.run(argv, env=ab_support.clean_environment({"FAKE_LOG": self.log}),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=120, cwd=self.tmp)

        for config, fragments in [
                ("ASYNCSHIM_ORDERING=fast", ["--config 'ASYNCSHIM_ORDERING=fast': ASYNCSHIM_ORDERING='fast' is not a "
                                             "valid ordering: expected one of device, stream, sync"]),
                ("ASYNCSHIM_ORDRING=stream", ["unknown variable ASYNCSHIM_ORDRING",
                                              "did you mean ASYNCSHIM_ORDERING?"])]:
            proc = run(config)
            self.assertExit(proc, 2)
            for fragment in fragments + ["asyncshim-ab: error: nothing was run"]:
                self.assertIn(fragment, proc.stderr)
            self.assertEqual(self.invocations(), [])
        # Valid settings, and variables that are not the shim's, run.
        proc = run("ASYNCSHIM_ORDERING=stream PYTORCH_NO_CUDA_MEMORY_CACHING=1")
        self.assertExit(proc, 0)
        self.assertEqual(len(self.invocations()), 2)

    def test_missing_program_exits_2(self):
        self.assertUsageError([], "program /nonexistent/program was not found",
                              program=["/nonexistent/program"])
        self.assertUsageError([], "program 'no-such-program-asyncshim' was not found in PATH",
                              program=["no-such-program-asyncshim"])
        self.assertUsageError([], "is not an executable file", program=[ab_support.HERE])

    def test_missing_shim_exits_2(self):
        self.assertUsageError(["--shim", "/nonexistent/libasyncshim.so"],
                              "--shim /nonexistent/libasyncshim.so: no such file", shim=False)
        # a copy of the script with no library anywhere near it
        os.mkdir(self.path("bin"))
        copy = self.path(os.path.join("bin", "asyncshim-ab"))
        with open(ab_support.SCRIPT) as src, open(copy, "w") as dst:
            dst.write(src.read())
        import subprocess
        proc = subprocess.run([sys.executable, copy, "--runs", "1", "--"] + ab_support.FAKE_PROGRAM,
                              env=ab_support.clean_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        self.assertExit(proc, 2)
        self.assertIn("libasyncshim.so was not found", proc.stderr)
        self.assertIn("--shim PATH", proc.stderr)
        # ... and with the install layout: bin/asyncshim-ab, lib/libasyncshim.so
        os.mkdir(self.path("lib"))
        os.symlink(self.shim, self.path(os.path.join("lib", "libasyncshim.so")))
        proc = subprocess.run([sys.executable, copy, "--runs", "1", "--warmup", "0",
                               "--export-json", "r.json", "--"] + ab_support.FAKE_PROGRAM,
                              env=ab_support.clean_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                              cwd=self.tmp)
        self.assertExit(proc, 0)
        self.assertEqual(self.read_json("r.json")["shim"],
                         self.path(os.path.join("lib", "libasyncshim.so")))

    def test_program_without_double_dash(self):
        proc = self.run_ab(["--runs", "1", "--warmup", "0"] + ab_support.FAKE_PROGRAM, program=False)
        self.assertExit(proc, 0)
        self.assertEqual(len(self.invocations()), 2)

    def test_version_and_help(self):
        proc = self.run_ab(["--version"], program=False, shim=False)
        self.assertExit(proc, 0)
        self.assertEqual(proc.stdout, "asyncshim-ab 0.1.0\n")
        self.assertEqual(ab_support.load_ab().VERSION, "0.1.0")
        proc = self.run_ab(["--help"], program=False, shim=False)
        self.assertExit(proc, 0)
        for option in ("--runs", "--warmup", "--min-time", "--baseline", "--config", "--shim",
                       "--ignore-failure", "--show-output", "--export-json", "--export-markdown",
                       "--export-csv", "--plot", "--stats-dir", "--version", "ASYNCSHIM_LIBRARY",
                       "ASYNCSHIM_MODE=observe", "ASYNCSHIM_MODE=pool", "ASYNCSHIM_STATS_FILE",
                       "Mann-Whitney", "bootstrap", "Exit status"):
            self.assertIn(option, proc.stdout)


class HyperfineOptions(AbTestCase):
    """The hyperfine options, with hyperfine's meaning."""

    def test_min_and_max_runs_bound_the_chosen_count(self):
        proc = self.run_ab(["--warmup", "0", "--min-time", "1000", "--max-runs", "3"])
        self.assertExit(proc, 0)
        self.assertEqual(len(self.invocations()), 2 * 3)
        os.remove(self.log)
        proc = self.run_ab(["--warmup", "0", "--min-time", "0.000001", "--min-runs", "4"])
        self.assertExit(proc, 0)
        self.assertEqual(len(self.invocations()), 2 * 4)

    def test_run_count_options_that_contradict_each_other(self):
        for options, text in [(["--runs", "3", "--min-runs", "2"], "cannot be combined with --min-runs"),
                              (["--min-runs", "5", "--max-runs", "4"], "5 is more than --max-runs 4"),
                              (["--max-runs", "0"], "argument -M/--max-runs")]:
            proc = self.run_ab(options)
            self.assertExit(proc, 2)
            self.assertIn(text, proc.stderr)
            self.assertEqual(self.invocations(), [])

    def test_command_names_name_the_arms(self):
        proc = self.run_ab(["--runs", "3", "--warmup", "0", "-n", "plain", "-n", "pooled",
                            "--export-json", "r.json"])
        self.assertExit(proc, 0)
        self.assertIn("Benchmark 1: plain\n", proc.stdout)
        self.assertIn("Benchmark 2: pooled\n", proc.stdout)
        self.assertIn("times faster than plain", proc.stdout.replace("slower", "faster"))
        self.assertEqual([r["command"] for r in self.read_json("r.json")["results"]], ["plain", "pooled"])
        proc = self.run_ab(["--runs", "1", "-n", "a", "-n", "b", "-n", "c"])
        self.assertExit(proc, 2)
        self.assertIn("3 --command-name given for 2 arms", proc.stderr)

    def test_time_unit(self):
        proc = self.run_ab(["--runs", "2", "--warmup", "0", "--time-unit", "second"])
        self.assertExit(proc, 0)
        self.assertRegex(proc.stdout, r"Time \(median\): +\d+\.\d{3} s\n")
        proc = self.run_ab(["--runs", "2", "--warmup", "0", "-u", "microsecond"])
        self.assertRegex(proc.stdout, "Time \\(median\\): +\\d+\\.\\d \u00b5s\n")

    def test_setup_prepare_and_cleanup(self):
        hooks = self.path("hooks.log")
        proc = self.run_ab(["--runs", "2", "--warmup", "1",
                            "--setup", "echo setup >> %s" % hooks,
                            "--prepare", "echo prepare >> %s" % hooks,
                            "--cleanup", "echo cleanup >> %s" % hooks])
        self.assertExit(proc, 0)
        with open(hooks) as fh:
            lines = fh.read().split()
        self.assertEqual(lines[0], "setup")
        self.assertEqual(lines[-1], "cleanup")
        self.assertEqual(lines.count("prepare"), 2 * (1 + 2))  # every run of both arms, warm-ups too
        proc = self.run_ab(["--runs", "2", "--prepare", "exit 4", "--cleanup", "echo cleanup >> %s" % hooks])
        self.assertExit(proc, 1)
        self.assertIn("the --prepare command 'exit 4' failed", proc.stderr)
        with open(hooks) as fh:
            self.assertEqual(fh.read().split().count("cleanup"), 2)  # cleanup runs after a failure too

    def test_style_full_shows_a_progress_bar_and_none_does_not(self):
        proc = self.run_ab(["--runs", "2", "--warmup", "1", "--style", "full"])
        self.assertExit(proc, 0)
        self.assertRegex(proc.stderr, r"\[#*-*\] Run 2/2 of 2 arms")
        self.assertIn("[" + "-" * 30 + "] Warm-up 1/1", proc.stderr)
        proc = self.run_ab(["--runs", "2", "--warmup", "1", "--style", "none"])
        self.assertExit(proc, 0)
        self.assertNotIn("Run 1/2", proc.stderr)
        proc = self.run_ab(["--style", "fancy"])
        self.assertExit(proc, 2)
        self.assertIn("argument --style", proc.stderr)

    def test_parameter_list_adds_an_arm_per_value(self):
        proc = self.run_ab(["--runs", "2", "--warmup", "0", "-L", "ASYNCSHIM_INITIAL_POOL_SIZE", "0,1GiB",
                            "--export-json", "r.json"])
        self.assertExit(proc, 0)
        results = self.read_json("r.json")["results"]
        self.assertEqual([r["name"] for r in results],
                         ["without asyncshim (observe)", "with asyncshim (ASYNCSHIM_INITIAL_POOL_SIZE=0)",
                          "with asyncshim (ASYNCSHIM_INITIAL_POOL_SIZE=1GiB)"])
        # The commands carry the value, as hyperfine's names do for a parameter scan.
        self.assertIn("ASYNCSHIM_INITIAL_POOL_SIZE=0 ", results[1]["command"])
        self.assertIn("ASYNCSHIM_INITIAL_POOL_SIZE=1GiB ", results[2]["command"])
        self.assertEqual(results[2]["env"]["ASYNCSHIM_INITIAL_POOL_SIZE"], "1GiB")

    def test_a_command_is_what_the_shell_would_run(self):
        # A value with a space is quoted after its '=', so the word stays an assignment.
        proc = self.run_ab(["--runs", "1", "--warmup", "0", "--config", "FAKE_TAG='two words'",
                            "--export-json", "r.json"])
        self.assertExit(proc, 0)
        command = self.read_json("r.json")["results"][1]["command"]
        self.assertIn(" FAKE_TAG='two words' ", command)
        words = shlex.split(command)
        self.assertIn("FAKE_TAG=two words", words)


class Plot(AbTestCase):
    def fake_matplotlib(self, body):
        package = self.path(os.path.join("pythonpath", "matplotlib"))
        os.makedirs(package)
        with open(os.path.join(package, "__init__.py"), "w") as fh:
            fh.write(textwrap.dedent(body))
        return {"PYTHONPATH": self.path("pythonpath")}

    def test_plot_without_matplotlib_warns_and_goes_on(self):
        # Hide any installed matplotlib, so the test means the same everywhere.
        env = self.fake_matplotlib("raise ImportError('hidden by the test')\n")
        proc = self.run_ab(["--runs", "1", "--warmup", "0", "--plot", "times.png",
                            "--export-json", "r.json"], env=env)
        self.assertExit(proc, 0)
        self.assertIn("Warning: matplotlib is not available; --plot skipped.", proc.stderr)
        self.assertFalse(os.path.exists(self.path("times.png")))
        self.assertTrue(os.path.exists(self.path("r.json")))
        self.assertIn("Summary", proc.stdout)

    def test_plot_draws_one_series_per_arm(self):
        # A stand-in for matplotlib that records what the wrapper asks it to draw.
        env = self.fake_matplotlib('''
            import json, sys, types
            calls = {"backend": None, "series": []}
            def use(name):
                calls["backend"] = name
            class Axes:
                def plot(self, xs, ys, **kw):
                    calls["series"].append({"x": list(xs), "y": list(ys), "label": kw.get("label")})
                def __getattr__(self, name):
                    return lambda *a, **k: None
            class Figure:
                def tight_layout(self):
                    pass
                def savefig(self, path):
                    with open(path, "w") as fh:
                        json.dump(calls, fh)
            pyplot = types.ModuleType("matplotlib.pyplot")
            pyplot.subplots = lambda **kw: (Figure(), Axes())
            pyplot.close = lambda fig: None
            sys.modules["matplotlib.pyplot"] = pyplot
            ''')
        proc = self.run_ab(["--runs", "2", "--warmup", "0", "--plot", "times.png",
                            "--config", "FAKE_TAG=x"], env=env)
        self.assertExit(proc, 0)
        self.assertNotIn("matplotlib", proc.stderr)
        drawn = self.read_json("times.png")
        self.assertEqual(drawn["backend"], "Agg")
        self.assertEqual([s["label"] for s in drawn["series"]],
                         ["without asyncshim (observe)", "with asyncshim (FAKE_TAG=x)"])
        for s in drawn["series"]:
            self.assertEqual(s["x"], [1, 2])
            self.assertTrue(all(0 < y < 10 for y in s["y"]))


if __name__ == "__main__":
    unittest.main()
