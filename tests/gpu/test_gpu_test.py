#!/usr/bin/env python3
"""CPU tier: the GPU tier's verdicts (tests/gpu/gpu_test.py, compare_runs.cmake,
check_output.cmake), with stand-in programs on a machine pretending to have a
device: a skip, a failure line or a wrong exit status is a failure, never a
skip or a pass; a shim that did not load, or that a bad setting disabled, fails
its statistics check; without a device every test skips, with its reason.

    python3 test_gpu_test.py SHIM STATS_PROBE
(STATS_PROBE: tests/shim/stats_probe, which allocates through the CUDA test
double, so that the real shim writes real statistics.)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
WRAPPER = os.path.join(HERE, "gpu_test.py")
COMPARE = os.path.join(HERE, "..", "shim", "compare_runs.cmake")
CHECK_OUTPUT = os.path.join(HERE, "check_output.cmake")
SHIM = STATS_PROBE = None
SERVED = "--stats=d['allocations'] > 0"


def stand_in(code):
    """A command line: python running `code` (the stand-in program)."""
    return [sys.executable, "-c", code]


class Verdicts(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.devices = os.path.join(self.dir.name, "devices.json")
        self.set_devices(1)

    def set_devices(self, count, reason=""):
        with open(self.devices, "w", encoding="utf-8") as f:
            json.dump({"count": count, "reason": reason}, f)

    def run_test(self, *options, command):
        """(exit status, output, verdict line) of gpu_test.py with these options."""
        detector = os.path.join(self.dir.name, "no-such-detector")
        out = subprocess.run([sys.executable, WRAPPER, "--devices", self.devices, "--detector", detector, *options,
                              "--", *command], capture_output=True, text=True, check=False)
        text = out.stdout + out.stderr
        verdict = [line for line in text.splitlines() if line.startswith("gpu-test: ")][-1]
        return out.returncode, text, verdict

    def assert_fails(self, *options, command, why):
        status, text, verdict = self.run_test(*options, command=command)
        self.assertEqual(status, 1, text)
        self.assertTrue(verdict.startswith("gpu-test: FAIL: "), text)
        self.assertIn(why, verdict)
        self.assertNotIn("gpu-test: SKIP: ", text)  # ctest's SKIP_REGULAR_EXPRESSION must not see one
        return text

    def assert_passes(self, *options, command):
        status, text, verdict = self.run_test(*options, command=command)
        self.assertEqual((status, verdict), (0, "gpu-test: passed"), text)
        return text

    def test_no_device_skips_with_its_reason_without_running(self):
        self.set_devices(0, "cudaGetDeviceCount: cudaErrorNoDevice")
        marker = os.path.join(self.dir.name, "ran")
        status, _, verdict = self.run_test(command=stand_in(f"open({marker!r}, 'w')"))
        self.assertEqual(status, 0)
        self.assertRegex(verdict, r"^gpu-test: SKIP: no CUDA device \(cudaGetDeviceCount: cudaErrorNoDevice")
        self.assertFalse(os.path.exists(marker))

    def test_missing_device_file_is_decided_by_the_detector(self):
        os.remove(self.devices)
        status, _, verdict = self.run_test(command=stand_in("pass"))
        self.assertEqual(status, 0)
        self.assertIn("no CUDA device", verdict)  # the detector could not run: no device, said why
        with open(self.devices, encoding="utf-8") as f:
            self.assertEqual(json.load(f)["count"], 0)

    def test_fewer_devices_than_needed_skips(self):
        status, _, verdict = self.run_test("--need-devices=2", command=stand_in("pass"))
        self.assertEqual((status, verdict), (0, "gpu-test: SKIP: needs 2 CUDA devices, this machine has 1"))

    def test_a_skip_where_a_device_exists_fails(self):
        for code in (0, 1, 77):
            self.assert_fails(command=stand_in(f"print('SKIP: no CUDA device (cudaErrorNoDevice)'); exit({code})"),
                              why="skipped ('no CUDA device (cudaErrorNoDevice)') on a machine with 1")

    def test_an_allowed_skip_skips_only_with_a_clean_exit(self):
        status, _, verdict = self.run_test("--allow-skip=torch is not installed",
                                           command=stand_in("print('SKIP: torch is not installed')"))
        self.assertEqual((status, verdict), (0, "gpu-test: SKIP: torch is not installed"))
        self.assert_fails("--allow-skip=torch is not installed",
                          command=stand_in("print('SKIP: torch is not installed'); exit(1)"), why="exit status 1")

    def test_exit_status_is_honoured_whatever_the_output(self):
        self.assert_fails("--stdout=passed", command=stand_in("print('probe: passed'); exit(1)"),
                          why="exit status 1, expected 0")
        self.assert_fails("--exit=1", command=stand_in("print('corrupted_bytes=5')"), why="exit status 0, expected 1")
        self.assert_passes("--exit=1", "--stdout=corrupted_bytes=[1-9]", command=stand_in("print('corrupted_bytes=5'); exit(1)"))

    def test_failure_lines_fail_a_clean_exit(self):
        for line in ("FAIL: threads", "probe: FAILED", "data WRONG"):
            self.assert_fails(command=stand_in(f"print({line!r})"), why=f"its output says '{line}'")

    def test_expected_output(self):
        self.assert_fails("--stdout=early_checks=[1-9]", command=stand_in("print('early_checks=0')"),
                          why="does not match 'early_checks=[1-9]'")

    def test_statistics_are_required_and_checked(self):
        write = ("import json, os; path = os.environ['ASYNCSHIM_STATS_FILE'].replace('%p', str(os.getpid()));"
                 " doc = json.load(open({example!r})); doc['devices'][0]['reuse_cache']['hits'] = {hits};"
                 " json.dump(doc, open(path, 'w'))")
        example = os.path.join(self.dir.name, "example.json")
        sys.path.insert(0, os.path.join(HERE, "..", "support"))
        import stats_schema  # noqa: PLC0415
        with open(example, "w", encoding="utf-8") as f:
            json.dump(stats_schema.documented_example(), f)
        self.assert_fails(SERVED, command=stand_in("pass"), why="wrote no statistics file")
        self.assert_passes(SERVED, "--stats=d['reuse_cache']['hits'] > 0",
                           command=stand_in(write.format(example=example, hits=5)))
        self.assert_fails(SERVED, "--stats=d['reuse_cache']['hits'] > 0",
                          command=stand_in(write.format(example=example, hits=0)),
                          why="not d['reuse_cache']['hits'] > 0")

    def test_the_real_shim_on_the_test_double(self):
        env = ["--env=ASYNCSHIM_INITIAL_POOL_SIZE=64MiB"]
        text = self.assert_passes("--shim=" + SHIM, *env, command=[STATS_PROBE, "basic"])
        self.assertIn("gpu-test: statistics: ", text)
        # Disabled by an invalid setting: it runs natively and writes no statistics.
        self.assert_fails("--shim=" + SHIM, *env, "--env=ASYNCSHIM_ORDERING=bogus", command=[STATS_PROBE, "basic"],
                          why="wrote no statistics file")
        # Fails to load: the dynamic loader ignores it and the program runs natively.
        broken = os.path.join(self.dir.name, "libasyncshim.so")
        with open(broken, "w", encoding="utf-8") as f:
            f.write("not a library\n")
        self.assert_fails("--shim=" + broken, *env, command=[STATS_PROBE, "basic"], why="wrote no statistics file")

    def program(self, code):
        """A PROGRAM for the CMake scripts ("|"-separated): python running a file with `code`
        (a file: the scripts split their arguments at each ";")."""
        path = os.path.join(self.dir.name, f"stand_in_{len(os.listdir(self.dir.name))}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code + "\n")
        return f"{sys.executable}|{path}"

    def cmake_script(self, script, *definitions):
        out = subprocess.run(["cmake", *definitions, "-P", script], capture_output=True, text=True, check=False)
        return out.returncode, out.stdout + out.stderr

    def test_compare_runs_skips_only_on_the_native_run(self):
        # Skips natively only: the native run's line is shown, for gpu_test.py to judge.
        program = self.program("import os\nprint('SKIP: no device' if 'LD_PRELOAD' not in os.environ else 'ran')")
        status, text = self.cmake_script(COMPARE, f"-DPRELOAD={SHIM}", f"-DPROGRAM={program}")
        self.assertEqual(status, 0, text)
        self.assertIn("SKIP: no device", text)
        # Skips under the shim only: a difference, and the shim run's line cannot read as a skip.
        program = self.program("import os\nprint('SKIP: no device' if 'LD_PRELOAD' in os.environ else 'ran')")
        status, text = self.cmake_script(COMPARE, f"-DPRELOAD={SHIM}", f"-DPROGRAM={program}")
        self.assertNotEqual(status, 0, text)
        self.assertIn("the runs differ", text)
        self.assertNotIn("SKIP: ", text)

    def test_compare_runs_failing_the_same_way_fails(self):
        program = self.program("print('probe: broken')\nexit(3)")
        status, text = self.cmake_script(COMPARE, f"-DPRELOAD={SHIM}", f"-DPROGRAM={program}", "-DEXPECT_STATUS=0")
        self.assertNotEqual(status, 0, text)
        self.assertIn("both runs exited 3, not 0", text)

    def test_check_output_skip_needs_a_clean_exit(self):
        program = self.program("print('SKIP: no CUDA device')\nexit(1)")
        status, text = self.cmake_script(CHECK_OUTPUT, f"-DPROGRAM={program}")
        self.assertNotEqual(status, 0, text)
        self.assertIn("exit status 1, not 0", text)


if __name__ == "__main__":
    SHIM, STATS_PROBE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
