#!/usr/bin/env python3
"""asyncshim-ab: the statistics, the statistics-file reader and the
formatting helpers, tested on known inputs (the script loaded as a module)."""

import math
import os
import random
import shutil
import sys
import tempfile
import unittest
from unittest import mock

sys.dont_write_bytecode = True  # no __pycache__ next to scripts/asyncshim-ab
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support  # noqa: E402

ab = ab_support.load_ab()
GIB = 1 << 30


class DescriptiveStatistics(unittest.TestCase):
    def test_mean_stddev_median(self):
        values = [2, 4, 4, 4, 5, 5, 7, 9]
        self.assertEqual(ab.mean(values), 5.0)
        # sample standard deviation (n - 1), as hyperfine: sqrt(32 / 7)
        self.assertAlmostEqual(ab.stddev(values), math.sqrt(32 / 7), places=12)
        self.assertEqual(ab.median(values), 4.5)
        self.assertEqual(ab.median([3, 1, 2]), 2)
        self.assertEqual(ab.median([0.4123]), 0.4123)

    def test_degenerate_inputs(self):
        self.assertIsNone(ab.mean([]))
        self.assertIsNone(ab.median([]))
        self.assertIsNone(ab.stddev([1.0]))
        self.assertEqual(ab.stddev([2.0, 2.0, 2.0]), 0.0)

    def test_percentile_interpolates_linearly(self):
        self.assertEqual(ab.percentile([4, 1, 3, 2], 0.0), 1)
        self.assertEqual(ab.percentile([4, 1, 3, 2], 1.0), 4)
        self.assertEqual(ab.percentile([4, 1, 3, 2], 0.5), 2.5)
        self.assertEqual(ab.percentile([1, 2, 3, 4], 0.25), 1.75)
        self.assertEqual(ab.percentile([7], 0.975), 7)
        with self.assertRaises(ValueError):
            ab.percentile([1, 2], 1.5)

    def test_ratio_propagates_relative_errors_like_hyperfine(self):
        ratio, sd = ab.ratio_with_stddev(10.0, 1.0, 5.0, 0.5)
        self.assertEqual(ratio, 2.0)
        self.assertAlmostEqual(sd, 2.0 * math.sqrt(0.1 ** 2 + 0.1 ** 2), places=12)
        # the example in the brief: 412.3 ± 5.1 against 171.0 ± 1.2
        ratio, sd = ab.ratio_with_stddev(0.4123, 0.0051, 0.1710, 0.0012)
        self.assertAlmostEqual(ratio, 0.4123 / 0.1710, places=12)
        self.assertAlmostEqual(sd, ratio * math.sqrt((0.0051 / 0.4123) ** 2 + (0.0012 / 0.1710) ** 2),
                               places=12)
        # a single run has no standard deviation: counts as 0
        self.assertEqual(ab.ratio_with_stddev(3.0, None, 1.5, None), (2.0, 0.0))

    def test_choose_run_count(self):
        self.assertEqual(ab.choose_run_count(0.1, 3.0), 30)
        self.assertEqual(ab.choose_run_count(0.07, 3.0), 43)   # rounded up
        self.assertEqual(ab.choose_run_count(1.0, 3.0), 10)    # never fewer than 10
        self.assertEqual(ab.choose_run_count(1e-5, 3.0), 1000)  # never more than 1000
        self.assertEqual(ab.choose_run_count(0.0, 3.0), 1000)


class MannWhitney(unittest.TestCase):
    def test_midranks(self):
        ranks, groups = ab.midranks([1, 2, 2, 3])
        self.assertEqual(ranks, [1.0, 2.5, 2.5, 4.0])
        self.assertEqual(groups, [1, 2, 1])

    def test_scipy_documentation_example(self):
        # scipy.stats.mannwhitneyu documentation: males vs females (Conover),
        # U1 = 17, method="asymptotic" -> p = 0.11134688653314041.
        u, z, p = ab.mann_whitney_u([19, 22, 16, 29, 24], [20, 11, 17, 12])
        self.assertEqual(u, 17.0)
        self.assertAlmostEqual(p, 0.11134688653314041, places=12)
        self.assertAlmostEqual(z, (17 - 10 - 0.5) / math.sqrt(5 * 4 * 10 / 12.0), places=12)

    def test_completely_separated_samples(self):
        # R: wilcox.test(c(1,2,3), c(4,5,6), exact=FALSE, correct=TRUE):
        # W = 0, p-value = 0.08086 (scipy asymptotic: 0.08085559837005224).
        u, z, p = ab.mann_whitney_u([1, 2, 3], [4, 5, 6])
        self.assertEqual(u, 0.0)
        self.assertLess(z, 0)
        self.assertAlmostEqual(p, 0.08085559837005224, places=12)
        # 4 vs 4, scipy asymptotic: 0.030382821976577504
        _u, _z, p = ab.mann_whitney_u([1, 2, 3, 4], [5, 6, 7, 8])
        self.assertAlmostEqual(p, 0.030382821976577504, places=12)

    def test_tie_correction_by_hand(self):
        # x = 1, 2, 2; y = 2, 3, 4. Midranks: 1 -> 1, the three 2s -> 3, 3 -> 5, 4 -> 6.
        # R1 = 1 + 3 + 3 = 7, U1 = 7 - 3*4/2 = 1, mu = 4.5.
        # Tie correction: one group of 3 -> sum(t^3 - t) = 24, n = 6:
        # var = 3*3/12 * ((6 + 1) - 24 / (6*5)) = 0.75 * 6.2 = 4.65.
        # z = (|1 - 4.5| - 0.5) / sqrt(4.65) = 3 / sqrt(4.65); p = erfc(z / sqrt 2).
        u, z, p = ab.mann_whitney_u([1, 2, 2], [2, 3, 4])
        self.assertEqual(u, 1.0)
        self.assertAlmostEqual(z, -3 / math.sqrt(4.65), places=12)
        self.assertAlmostEqual(p, math.erfc(3 / math.sqrt(4.65) / math.sqrt(2)), places=12)
        self.assertAlmostEqual(p, 0.16416, places=5)

    def test_symmetric_and_no_difference(self):
        a, b = [3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]
        self.assertAlmostEqual(ab.mann_whitney_u(a, b)[2], ab.mann_whitney_u(b, a)[2], places=15)
        self.assertEqual(ab.mann_whitney_u([1, 2, 3], [1, 2, 3])[2], 1.0)
        # every value tied: zero variance, no evidence
        self.assertEqual(ab.mann_whitney_u([5, 5, 5], [5, 5, 5]), (4.5, 0.0, 1.0))


class Bootstrap(unittest.TestCase):
    A = [0.41, 0.42, 0.40, 0.43, 0.41, 0.44, 0.42, 0.40]
    B = [0.17, 0.18, 0.17, 0.16, 0.19, 0.17, 0.18, 0.17]

    def test_deterministic_with_the_fixed_seed(self):
        first = ab.bootstrap_ratio_of_medians(self.A, self.B)
        self.assertEqual(first, ab.bootstrap_ratio_of_medians(self.A, self.B))
        # The same algorithm written out: 2000 resamples, random.Random(12345),
        # percentile interval (2.5 %, 97.5 %) of median(a*) / median(b*).
        rng = random.Random(12345)
        ratios = []
        for _ in range(2000):
            ratios.append(ab.median(rng.choices(self.A, k=len(self.A)))
                          / ab.median(rng.choices(self.B, k=len(self.B))))
        self.assertEqual(first, (ab.percentile(ratios, 0.025), ab.percentile(ratios, 0.975)))
        self.assertEqual(ab.BOOTSTRAP_RESAMPLES, 2000)
        self.assertEqual(ab.BOOTSTRAP_SEED, 12345)

    def test_interval_brackets_the_ratio_of_medians(self):
        lo, hi = ab.bootstrap_ratio_of_medians(self.A, self.B)
        point = ab.median(self.A) / ab.median(self.B)
        self.assertLessEqual(lo, point)
        self.assertGreaterEqual(hi, point)
        self.assertLess(lo, hi)
        # a different seed gives a (slightly) different interval
        self.assertNotEqual((lo, hi), ab.bootstrap_ratio_of_medians(self.A, self.B, seed=1))

    def test_constant_samples(self):
        self.assertEqual(ab.bootstrap_ratio_of_medians([2, 2, 2], [1, 1, 1]), (2.0, 2.0))
        self.assertIsNone(ab.bootstrap_ratio_of_medians([1, 2], [0, 0]))
        self.assertIsNone(ab.bootstrap_ratio_of_medians([], [1]))


class Comparison(unittest.TestCase):
    def test_faster_candidate(self):
        a = [0.40, 0.41, 0.42, 0.43]
        b = [0.20, 0.21, 0.19, 0.22]
        c = ab.compare_arms(a, b)
        self.assertTrue(c["faster"])
        self.assertAlmostEqual(c["ratio"], ab.mean(a) / ab.mean(b), places=12)
        self.assertAlmostEqual(c["speedup"], c["ratio"], places=12)
        self.assertTrue(c["significant"])
        self.assertAlmostEqual(c["mann_whitney_p"], 0.030382821976577504, places=12)
        lo, hi = c["bootstrap_interval"]
        self.assertLessEqual(lo, ab.median(a) / ab.median(b))
        self.assertGreaterEqual(hi, ab.median(a) / ab.median(b))

    def test_slower_candidate_is_worded_as_slower(self):
        a = [0.10, 0.11, 0.10]
        b = [0.20, 0.22, 0.21]
        c = ab.compare_arms(a, b)
        self.assertFalse(c["faster"])
        self.assertGreater(c["ratio"], 1.0)
        self.assertAlmostEqual(c["ratio"], ab.mean(b) / ab.mean(a), places=12)
        self.assertAlmostEqual(c["speedup"], ab.mean(a) / ab.mean(b), places=12)
        lo, hi = c["bootstrap_interval"]
        self.assertGreater(lo, 1.0)  # in the direction of the sentence (B / A)
        self.assertFalse(c["significant"])  # 3 vs 3 fully separated: p = 0.081

    def test_too_few_runs(self):
        c = ab.compare_arms([0.1, 0.2], [0.1, 0.3])
        self.assertIsNone(c["mann_whitney_p"])
        self.assertIsNone(c["significant"])
        self.assertIsNone(c["bootstrap_interval"])


def fake_stats(mode="pool", **overrides):
    doc = {
        "format": "asyncshim-stats", "format_version": 1, "shim_version": "0.1.0",
        "pid": 1234, "mode": mode, "settings": {"ASYNCSHIM_STREAM": "legacy"},
        "something_new": [1, 2, 3],
        "devices": [
            {"device": 0, "allocations": 10, "frees": 9, "bytes_requested": 12345,
             "bytes_in_use": 100, "peak_bytes_in_use": 5000, "live_allocations": 1,
             "pool_reserved_high_water": GIB if mode == "pool" else None,
             "passed_through": {"total": 2, "zero_size": 2}, "failed_allocations": 0,
             "time_in_calls_ns": {"cudaMalloc": 12345, "cudaFree": 2345}, "new_field": 7},
            {"device": 1, "allocations": 4, "peak_bytes_in_use": 1000,
             "pool_reserved_high_water": None, "failed_allocations": 2,
             "time_in_calls_ns": {"cudaMalloc": 5, "cudaFree": 5}},
        ],
        "unattributed": {"allocations_passed_through": 0, "frees_passed_through": 3,
                         "time_in_calls_ns": {"cudaMalloc": 0, "cudaFree": 100}},
    }
    doc.update(overrides)
    return doc


class StatsFiles(unittest.TestCase):
    def test_figures_of_one_process(self):
        f = ab.parse_stats(fake_stats())
        self.assertEqual(f["allocations"], 14)
        self.assertEqual(f["peak_bytes_in_use"], 6000)
        self.assertEqual(f["pool_reserved_high_water"], GIB)  # the null device adds nothing
        self.assertEqual(f["time_in_calls_ns"], 12345 + 2345 + 5 + 5 + 100)
        self.assertEqual(f["failed_allocations"], 2)
        self.assertEqual(f["mode"], "pool")
        self.assertIsNone(ab.parse_stats(fake_stats("observe"))["pool_reserved_high_water"])

    def test_sum_over_processes(self):
        one = ab.parse_stats(fake_stats())
        other = ab.parse_stats(fake_stats("observe"))
        total = ab.combine_process_figures([one, other])
        self.assertEqual(total["allocations"], 28)
        self.assertEqual(total["pool_reserved_high_water"], GIB)
        self.assertEqual(total["processes"], 2)
        self.assertIsNone(ab.combine_process_figures([]))
        self.assertIsNone(ab.combine_process_figures([other])["pool_reserved_high_water"])

    def test_medians_over_runs(self):
        runs = [ab.combine_process_figures([ab.parse_stats(fake_stats())]), None,
                ab.combine_process_figures([ab.parse_stats(fake_stats(), )])]
        runs[2]["allocations"] = 20
        med = ab.gpu_medians(runs)
        self.assertEqual(med["allocations"], 17.0)  # the run without figures is left out
        self.assertEqual(med["pool_reserved_high_water"], GIB)
        self.assertIsNone(ab.gpu_medians([None, None]))

    def test_rejected_documents(self):
        with self.assertRaisesRegex(ValueError, "format"):
            ab.parse_stats(fake_stats(format="something-else"))
        with self.assertRaisesRegex(ValueError, "newer"):
            ab.parse_stats(fake_stats(format_version=2))
        with self.assertRaisesRegex(ValueError, "format_version"):
            ab.parse_stats(fake_stats(format_version="1"))
        with self.assertRaisesRegex(ValueError, "not a number"):
            bad = fake_stats()
            bad["devices"][0]["allocations"] = "many"
            ab.parse_stats(bad)
        with self.assertRaises(ValueError):
            ab.parse_stats([1, 2])

    def test_collect_run_stats_reads_every_process_file_and_warns_once(self):
        import io
        import json
        tmp = tempfile.mkdtemp()
        try:
            for pid in (11, 12):
                with open(os.path.join(tmp, "b-3-%d.json" % pid), "w") as fh:
                    json.dump(fake_stats(), fh)
            with open(os.path.join(tmp, "b-30-13.json"), "w") as fh:  # another run
                json.dump(fake_stats(), fh)
            for pid in (14, 15):
                with open(os.path.join(tmp, "b-4-%d.json" % pid), "w") as fh:
                    json.dump(fake_stats(format_version=9), fh)
            with open(os.path.join(tmp, "b-5-16.json"), "w") as fh:
                fh.write("{ truncated")
            stream = io.StringIO()
            warnings = ab.Warnings(stream)
            run3 = ab.collect_run_stats(tmp, "b-3", "pool", "with asyncshim", warnings)
            self.assertEqual(run3["allocations"], 28)
            self.assertEqual(run3["processes"], 2)
            self.assertEqual(stream.getvalue(), "")
            self.assertIsNone(ab.collect_run_stats(tmp, "b-4", "pool", "with asyncshim", warnings))
            self.assertEqual(stream.getvalue().count("newer than this asyncshim-ab understands"), 1)
            self.assertIsNone(ab.collect_run_stats(tmp, "b-5", "pool", "with asyncshim", warnings))
            self.assertIn("b-5-16.json", stream.getvalue())
            self.assertIsNone(ab.collect_run_stats(tmp, "b-6", "pool", "with asyncshim", warnings))
            ab.collect_run_stats(tmp, "b-3", "observe", "without asyncshim (observe)", warnings)
            self.assertIn("reported mode 'pool', not 'observe'", stream.getvalue())
        finally:
            shutil.rmtree(tmp)


class Formatting(unittest.TestCase):
    def test_time_units_like_hyperfine(self):
        self.assertEqual(ab.format_time(0.4123), "412.3 ms")
        self.assertEqual(ab.format_time(0.0005), "500.0 \u00b5s")
        self.assertEqual(ab.format_time(2.5), "2.500 s")
        self.assertEqual(ab.format_time(0.0051, ab.time_unit_for(0.4123), 5), "  5.1 ms")
        self.assertEqual(ab.format_time(None), "\u2014")

    def test_bytes_and_counts(self):
        self.assertEqual(ab.format_bytes(812.4 * 1024 * 1024), "812.4 MiB")
        self.assertEqual(ab.format_bytes(1023), "1023 B")
        self.assertEqual(ab.format_bytes(1.2 * GIB), "1.2 GiB")
        self.assertEqual(ab.format_bytes(None), "\u2014")
        self.assertEqual(ab.format_count(34512), "34,512")
        self.assertEqual(ab.format_count(34512.5), "34,512.5")
        self.assertEqual(ab.format_p(3.1e-05), "= 3.1e-05")

    def test_describe_exit(self):
        self.assertEqual(ab.describe_exit(3), "exited with status 3")
        self.assertEqual(ab.describe_exit(-9), "was killed by signal 9 (SIGKILL)")

    def test_parse_config(self):
        self.assertEqual(ab.parse_config("ASYNCSHIM_INITIAL_POOL_SIZE=0"),
                         [("ASYNCSHIM_INITIAL_POOL_SIZE", "0")])
        self.assertEqual(ab.parse_config("A=1  B='4 GiB' C="),
                         [("A", "1"), ("B", "4 GiB"), ("C", "")])
        for bad in ("", "   ", "novalue", "=1", "1A=2", "A-B=1", "'unclosed=1", "LD_PRELOAD=x",
                    "ASYNCSHIM_STATS_FILE=/tmp/x"):
            with self.assertRaises(ValueError, msg=bad):
                ab.parse_config(bad)


class Report(unittest.TestCase):
    """format_report, markdown_tables and write_csv on arms filled by hand."""

    def make_arm(self, kind, times, gpu):
        if kind == "A":
            arm = ab.build_arms("observe", [], "/x/libasyncshim.so")[0]
        else:
            arm = ab.build_arms("observe", [], "/x/libasyncshim.so")[1]
        arm.times = list(times)
        arm.user = [t / 2 for t in times]
        arm.system = [t / 10 for t in times]
        arm.peak_rss_kib = [812 * 1024] * len(times)
        arm.exit_codes = [0] * len(times)
        arm.gpu = list(gpu)
        return arm

    def figures(self, allocations, hw=None):
        return {"allocations": allocations, "peak_bytes_in_use": int(1.2 * GIB),
                "pool_reserved_high_water": hw, "time_in_calls_ns": 310200000,
                "failed_allocations": 0, "processes": 1, "devices": 1}

    def test_report_lines(self):
        a = self.make_arm("A", [0.4123, 0.4050, 0.4217, 0.4110],
                          [self.figures(34512)] * 3 + [None])
        b = self.make_arm("B", [0.1710, 0.1690, 0.1730, 0.1700],
                          [self.figures(34512, 4 * GIB)] * 4)
        comps = [ab.compare_arms(a.times, b.times)]
        text = ab.format_report([a, b], comps)
        lines = text.splitlines()
        self.assertEqual(lines[0], "Benchmark 1: without asyncshim (observe)")
        self.assertEqual(lines[1], "  Time (mean \u00b1 \u03c3):     412.5 ms \u00b1   6.9 ms    "
                                   "[User: 206.2 ms, System: 41.2 ms]")
        self.assertEqual(lines[2], "  Time (median):       411.6 ms")
        self.assertEqual(lines[3], "  Range (min \u2026 max):   405.0 ms \u2026 421.7 ms    4 runs")
        self.assertEqual(lines[4], "  Peak RSS (median):   812.0 MiB")
        self.assertEqual(lines[5], "  GPU (median/run):    34,512 allocations, peak in use 1.2 GiB "
                                   "(sum of per-device peaks), pool reserved high-water \u2014, "
                                   "0 failed, 310.2 ms in cudaMalloc/cudaFree")
        self.assertEqual(lines[6], "  GPU note:         1 of 4 runs wrote no statistics "
                                   "(left out of the medians)")
        self.assertIn("pool reserved high-water 4.0 GiB", text)
        self.assertIn("Summary\n  with asyncshim ran\n    2.42 \u00b1 0.05 times faster than "
                      "without asyncshim (observe)\n", text)
        self.assertIn("  Mann-Whitney U test: p = 0.03 (two-sided, 4 vs 4 runs): the difference "
                      "is significant at the 5% level.", text)
        self.assertRegex(text, r"  95% bootstrap interval of the ratio of medians: 2\.\d\d \u2026 2\.\d\d$")

        md = ab.markdown_tables([a, b]).splitlines()
        self.assertEqual(md[2], "| `without asyncshim (observe)` | 412.5 \u00b1 6.9 | 405.0 | 421.7 | "
                                "2.42 \u00b1 0.05 |")
        self.assertEqual(md[3], "| `with asyncshim` | 170.8 \u00b1 1.7 | 169.0 | 173.0 | 1.00 |")
        self.assertIn("| `with asyncshim` | 34,512 | 1.2 GiB | 4.0 GiB | 0 | 310.2 ms |", md)

        import io
        buf = io.StringIO()
        ab.write_csv(buf, [a, b])
        rows = buf.getvalue().splitlines()
        self.assertEqual(rows[0], ",".join(ab.CSV_HEADER))
        self.assertTrue(rows[1].startswith("without asyncshim (observe),0.41"))
        self.assertTrue(rows[1].endswith(",831488,34512,%d," % int(1.2 * GIB)))
        self.assertTrue(rows[2].endswith(",831488,34512,%d,%d" % (int(1.2 * GIB), 4 * GIB)))

    def test_single_run_and_slower(self):
        a = self.make_arm("A", [0.0004], [None])
        b = self.make_arm("B", [0.0008], [None])
        text = ab.format_report([a, b], [ab.compare_arms(a.times, b.times)])
        self.assertIn("  Time (abs \u2261):        400.0 \u00b5s    [User: 200.0 \u00b5s, "
                      "System: 40.0 \u00b5s]", text)
        self.assertIn("  GPU:              no statistics were written", text)
        self.assertIn("  Peak RSS (median):   812.0 MiB\n", text)  # no floor given: no note
        text = ab.format_report([a, b], [ab.compare_arms(a.times, b.times)], 800 * 1024)
        self.assertIn("  Peak RSS (median):   812.0 MiB    (at most: the kernel counts 800.0 MiB "
                      "of this wrapper's memory into any program it starts)\n", text)
        text = ab.format_report([a, b], [ab.compare_arms(a.times, b.times)], 16 * 1024)
        self.assertIn("  Peak RSS (median):   812.0 MiB\n", text)
        self.assertIn("    2.00 times slower than without asyncshim (observe)\n", text)
        self.assertIn("significance cannot be judged with fewer than 3 runs per arm (1 vs 1 runs)",
                      text)


class FindShim(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.env = mock.patch.dict(os.environ)
        self.env.start()
        os.environ.pop("ASYNCSHIM_LIBRARY", None)

    def tearDown(self):
        self.env.stop()
        shutil.rmtree(self.tmp)

    def touch(self, *parts):
        path = os.path.join(self.tmp, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        return path

    def test_order_of_places(self):
        script = self.touch("bin", "asyncshim-ab")
        with self.assertRaisesRegex(ab.UsageError, "libasyncshim.so was not found"):
            ab.find_shim(None, script)
        source_tree = self.touch("build", "shim", "libasyncshim.so")
        self.assertEqual(ab.find_shim(None, script), source_tree)
        build_tree = self.touch("shim", "libasyncshim.so")
        self.assertEqual(ab.find_shim(None, script), build_tree)
        installed = self.touch("lib", "libasyncshim.so")
        self.assertEqual(ab.find_shim(None, script), installed)
        beside = self.touch("bin", "libasyncshim.so")
        self.assertEqual(ab.find_shim(None, script), beside)
        from_env = self.touch("elsewhere", "libasyncshim.so")
        os.environ["ASYNCSHIM_LIBRARY"] = from_env
        self.assertEqual(ab.find_shim(None, script), from_env)
        explicit = self.touch("explicit.so")
        self.assertEqual(ab.find_shim(explicit, script), explicit)

    def test_symbolic_link_to_the_script(self):
        # e.g. ~/bin/asyncshim-ab -> <source tree>/scripts/asyncshim-ab
        script = self.touch("tree", "scripts", "asyncshim-ab")
        library = self.touch("tree", "build", "shim", "libasyncshim.so")
        os.makedirs(os.path.join(self.tmp, "home", "bin"))
        link = os.path.join(self.tmp, "home", "bin", "asyncshim-ab")
        os.symlink(script, link)
        self.assertEqual(ab.find_shim(None, link), library)

    def test_missing_explicit_or_environment_library(self):
        with self.assertRaisesRegex(ab.UsageError, "--shim /nonexistent/libasyncshim.so"):
            ab.find_shim("/nonexistent/libasyncshim.so", __file__)
        os.environ["ASYNCSHIM_LIBRARY"] = "/nonexistent/x.so"
        with self.assertRaisesRegex(ab.UsageError, "ASYNCSHIM_LIBRARY=/nonexistent/x.so"):
            ab.find_shim(None, __file__)


if __name__ == "__main__":
    unittest.main()
