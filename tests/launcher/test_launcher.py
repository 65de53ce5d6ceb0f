"""scripts/asyncshim (the launcher), as copied into the build tree's bin/:
the environment it gives the program, its checks, its exit status, and the
options it takes from asyncshim-settings --list.

    python3 test_launcher.py BUILD_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = None


def launch(*args, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_") and k != "LD_PRELOAD"}
    full.update(env or {})
    return subprocess.run([os.path.join(BUILD, "bin", "asyncshim"), *args], env=full,
                          capture_output=True, text=True, check=False)


def listed_variables():
    """asyncshim-settings --list: (name, default, accepted, invalid, summary) per line."""
    out = subprocess.run([os.path.join(BUILD, "bin", "asyncshim-settings"), "--list"], capture_output=True, text=True,
                         check=True)
    return [tuple(line.split("\t")[:5]) for line in out.stdout.splitlines()]


# The variables the launcher sets with options of its own (--stats, --stats=FILE,
# --leak-report, --leak-report=FILE, --verbose) or not at all; every other
# listed variable has an option named after it.
NOT_AN_OPTION = {"ASYNCSHIM_SHOW_STATS", "ASYNCSHIM_STATS_FILE", "ASYNCSHIM_LEAK_REPORT", "ASYNCSHIM_LEAK_REPORT_FILE",
                 "ASYNCSHIM_LOG_LEVEL", "ASYNCSHIM_LOG_FILE", "ASYNCSHIM_DISABLE"}


def option_of(name):
    return "--" + name[len("ASYNCSHIM_"):].lower().replace("_", "-")


# A program that prints the variables the launcher sets.
SHOW = ["sh", "-c", 'echo "LD_PRELOAD=$LD_PRELOAD"; env | grep "^ASYNCSHIM_" | sort']


class Environment(unittest.TestCase):
    def test_options_become_variables_and_the_shim_is_preloaded(self):
        out = launch("--initial-pool-size", "half-free", "--release-threshold=25%", "--idle-release", "500ms",
                     "--export-handle-type", "posix_fd",
                     "--stream", "per-thread", "--mode", "observe", "--intercept=driver", "--ordering", "sync",
                     "--stats=/tmp/s-%p.json",
                     "--verbose", "--", *SHOW)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        shim = os.path.realpath(os.path.join(BUILD, "shim", "libasyncshim.so"))
        self.assertEqual(lines[0], f"LD_PRELOAD={shim}")
        self.assertEqual(lines[1:], sorted([
            "ASYNCSHIM_EXPORT_HANDLE_TYPE=posix_fd", "ASYNCSHIM_IDLE_RELEASE=500ms", "ASYNCSHIM_INITIAL_POOL_SIZE=half-free",
            "ASYNCSHIM_INTERCEPT=driver",
            "ASYNCSHIM_LOG_LEVEL=info",
            "ASYNCSHIM_MODE=observe", "ASYNCSHIM_ORDERING=sync", "ASYNCSHIM_RELEASE_THRESHOLD=25%", "ASYNCSHIM_STATS_FILE=/tmp/s-%p.json",
            "ASYNCSHIM_STREAM=per-thread"]))
        self.assertEqual(out.stderr, "")

    def test_existing_preload_is_kept_after_the_shim(self):
        out = launch(*SHOW, env={"LD_PRELOAD": "/lib/x86_64-linux-gnu/libm.so.6"})
        self.assertTrue(out.stdout.splitlines()[0].endswith("libasyncshim.so:/lib/x86_64-linux-gnu/libm.so.6"),
                        out.stdout)

    def test_plain_stats_prints_the_table(self):
        out = launch("--stats", *SHOW)
        self.assertIn("ASYNCSHIM_SHOW_STATS=1", out.stdout.splitlines())

    def test_program_arguments_are_not_options(self):
        out = launch("--", "sh", "-c", 'echo "$@"', "sh", "--stats", "--mode", "x")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "--stats --mode x")

    def test_library_option_and_variable(self):
        out = launch("--library", "/lib/x86_64-linux-gnu/libm.so.6", *SHOW)
        self.assertEqual(out.stdout.splitlines()[0], "LD_PRELOAD=" + os.path.realpath("/lib/x86_64-linux-gnu/libm.so.6"))
        out = launch(*SHOW, env={"ASYNCSHIM_LIBRARY": "/lib/x86_64-linux-gnu/libm.so.6"})
        self.assertEqual(out.stdout.splitlines()[0], "LD_PRELOAD=" + os.path.realpath("/lib/x86_64-linux-gnu/libm.so.6"))
        self.assertEqual(out.stdout.splitlines()[1:], [], "ASYNCSHIM_LIBRARY is the launcher's, not the program's")
        for args, env in [(["--library", "/nonexistent.so"], {}), ([], {"ASYNCSHIM_LIBRARY": "/nonexistent.so"})]:
            out = launch(*args, *SHOW, env=env)
            self.assertEqual(out.returncode, 2)
            self.assertIn("libasyncshim.so not found at /nonexistent.so", out.stderr)


class Checks(unittest.TestCase):
    def test_bad_value_uses_the_shims_message_with_the_option_name(self):
        out = launch("--release-threshold", "lots", "--", "true")
        self.assertEqual(out.returncode, 2)
        self.assertIn("asyncshim: error: --release-threshold='lots' is not a valid size: expected a number of bytes",
                      out.stderr)
        self.assertIn("asyncshim: error: nothing was run", out.stderr)
        self.assertNotIn("is disabled for this process", out.stderr)

    def test_every_kind_of_bad_value(self):
        for args, text in [(["--initial-pool-size", "4GB"], "--initial-pool-size='4GB' is ambiguous"),
                           (["--export-handle-type", "ipc"], "--export-handle-type='ipc' is not a valid export handle type"),
                           (["--stream", "fast"], "--stream='fast' is not a valid stream"),
                           (["--mode", "watch"], "--mode='watch' is not a valid mode"),
                           (["--intercept", "both"], "--intercept='both' is not a valid interception level"),
                           (["--ordering", "fast"], "--ordering='fast' is not a valid ordering"),
                           (["--idle-release", "soon"], "--idle-release='soon' is not a valid duration"),
                           (["--release-threshold", "half-free"], "half-free (half of the device's free memory) is "
                            "accepted only by ASYNCSHIM_INITIAL_POOL_SIZE")]:
            out = launch(*args, "true")
            self.assertEqual(out.returncode, 2, args)
            self.assertIn(text, out.stderr)

    def test_usage_errors(self):
        for args, text in [(["--bogus", "true"], "unknown option --bogus"), (["--stream"], "--stream needs a value"),
                           ([], "no program given"),
                           (["no-such-program-xyz"], "program not found in PATH: no-such-program-xyz"),
                           (["./no-such-program-xyz"], "program not found: ./no-such-program-xyz"),
                           (["--stats=", "true"], "--stats= needs a file name")]:
            out = launch(*args)
            self.assertEqual(out.returncode, 2, args)
            self.assertIn(text, out.stderr)

    def test_unknown_variable_is_left_to_the_shim_to_warn_about_once(self):
        # The shim says it when the program starts CUDA; the launcher does not say it a second time.
        out = launch("true", env={"ASYNCSHIM_STREEM": "legacy"})
        self.assertEqual(out.returncode, 0)
        self.assertEqual(out.stderr, "")

    def test_a_misspelt_option_gets_a_suggestion(self):
        for written, meant in [("--ordring", "--ordering"), ("--pool-size", "--initial-pool-size"),
                               ("--libary", "--library"), ("--threshold", "--release-threshold")]:
            out = launch(written, "x", "true")
            self.assertEqual(out.returncode, 2, written)
            self.assertIn(f"unknown option {written}; did you mean {meant}? (see asyncshim --help)", out.stderr)
        out = launch("--frobnicate", "true")
        self.assertIn("unknown option --frobnicate (see asyncshim --help)", out.stderr)

    def test_double_dash_is_not_a_value(self):
        for args in (["--initial-pool-size", "--", "true"], ["--library", "--", "true"]):
            out = launch(*args)
            self.assertEqual(out.returncode, 2, args)
            self.assertIn(f"{args[0]} needs a value, and got --, which ends the options", out.stderr)

    def test_a_program_that_cannot_run_says_why(self):
        with tempfile.TemporaryDirectory() as folder:
            plain = os.path.join(folder, "data.txt")
            with open(plain, "w") as f:
                f.write("not a program\n")
            for program, text in [(plain, f"program {plain} is not executable"),
                                  (folder, f"program {folder} is a folder, not a program")]:
                out = launch("--", program)
                self.assertEqual(out.returncode, 2, program)
                self.assertIn(text, out.stderr)

    def test_library_must_be_a_shared_library(self):
        with tempfile.TemporaryDirectory() as folder:
            text = os.path.join(folder, "libasyncshim.so")
            with open(text, "w") as f:
                f.write("not a library\n")
            for library in (text, folder):
                out = launch("--library", library, "true")
                self.assertEqual(out.returncode, 2, library)
                self.assertIn(os.path.realpath(library), out.stderr)
                self.assertRegex(out.stderr, "is not a (shared library|readable file)")

    def test_stats_file_is_checked_before_the_program_runs(self):
        out = launch("--stats=/nonexistent/folder/s-%p.json", *SHOW)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--stats=/nonexistent/folder/s-%p.json: the folder /nonexistent/folder does not exist", out.stderr)
        self.assertEqual(out.stdout, "")
        with tempfile.TemporaryDirectory() as folder:
            out = launch(f"--stats={folder}", "true")
            self.assertEqual(out.returncode, 2)
            self.assertIn("is a folder; give a file name", out.stderr)
            out = launch(f"--stats={folder}/s-%p.json", "true")
            self.assertEqual(out.returncode, 0, out.stderr)


    def test_leak_report_options(self):
        out = launch("--leak-report", *SHOW)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("ASYNCSHIM_LEAK_REPORT=1\n", out.stdout)
        self.assertNotIn("ASYNCSHIM_LEAK_REPORT_FILE", out.stdout)
        with tempfile.TemporaryDirectory() as folder:
            out = launch(f"--leak-report={folder}/leaks-%p.json", *SHOW)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(f"ASYNCSHIM_LEAK_REPORT_FILE={folder}/leaks-%p.json\n", out.stdout)
            out = launch(f"--leak-report={folder}", "true")
            self.assertEqual(out.returncode, 2)
            self.assertIn("is a folder; give a file name", out.stderr)
        out = launch("--leak-report=/nonexistent/folder/l.json", *SHOW)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--leak-report=/nonexistent/folder/l.json: the folder /nonexistent/folder does not exist",
                      out.stderr)
        self.assertEqual(out.stdout, "")
        out = launch("--event-log", "/nonexistent/folder/e.csv", "true")
        self.assertEqual(out.returncode, 2)
        self.assertIn("--event-log=/nonexistent/folder/e.csv: the folder /nonexistent/folder does not exist", out.stderr)
        out = launch("--leak-reprt", "true")
        self.assertEqual(out.returncode, 2)
        self.assertIn("did you mean --leak-report?", out.stderr)


class OptionsFromTheList(unittest.TestCase):
    """The options that set a variable come from asyncshim-settings --list."""

    def test_the_list_has_five_tab_separated_fields(self):
        rows = listed_variables()
        self.assertGreater(len(rows), 0)
        for row in rows:
            self.assertEqual(len(row), 5, row)
            self.assertTrue(row[0].startswith("ASYNCSHIM_"), row)
            self.assertIn(row[3], ("disables", "uses-default", "-"), row)

    def test_the_options_of_today_remain(self):
        options = {option_of(name) for name, *_ in listed_variables() if name not in NOT_AN_OPTION}
        self.assertLessEqual({"--initial-pool-size", "--release-threshold", "--idle-release",
                                   "--export-handle-type", "--stream", "--mode", "--intercept", "--ordering"}, options)

    def test_every_listed_variable_has_its_option(self):
        for name, *_ in listed_variables():
            if name in NOT_AN_OPTION:
                continue
            option = option_of(name)
            for args in ([option + "="], [option, ""]):  # empty: as if unset, and always valid
                out = launch(*args, *SHOW)
                self.assertEqual(out.returncode, 0, (args, out.stderr))
                self.assertIn(name + "=", out.stdout.splitlines(), args)

    def test_variables_without_an_option(self):
        for name in NOT_AN_OPTION - {"ASYNCSHIM_LEAK_REPORT"}:  # --leak-report is the launcher's own flag
            out = launch(option_of(name), "1", "true")
            self.assertEqual(out.returncode, 2, name)
            self.assertRegex(out.stderr, rf"unknown option {option_of(name)}(; did you mean --[a-z-]+\?)? "
                                         r"\(see asyncshim --help\)")

    def test_help_lists_every_option_with_its_variable_values_and_default(self):
        out = launch("--help")
        self.assertEqual(out.returncode, 0)
        help_text = " ".join(out.stdout.split())  # the wrapping aside
        for name, default, accepted, _, summary in listed_variables():
            if name in NOT_AN_OPTION:
                continue
            self.assertIn(f"{option_of(name)} VALUE {name}: {' '.join(summary.split())}", help_text)
            self.assertIn(f"values: {' '.join(accepted.split())}; default: {default.strip('()')}", help_text)
        for own in ("--stats ", "--stats=FILE", "--leak-report ", "--leak-report=FILE", "--verbose", "--library PATH", "--print-library", "--version",
                    "-h, --help"):
            self.assertIn(own, out.stdout)

    def test_without_asyncshim_settings(self):
        with tempfile.TemporaryDirectory() as alone:
            shutil.copy(os.path.join(BUILD, "bin", "asyncshim"), alone)
            launcher = os.path.join(alone, "asyncshim")
            libm = ["--library", "/lib/x86_64-linux-gnu/libm.so.6"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
            out = subprocess.run([launcher, "--help"], env=env, capture_output=True, text=True, check=False)
            self.assertEqual(out.returncode, 0)
            self.assertIn("asyncshim-settings, which lists these options, is not found", " ".join(out.stdout.split()))
            out = subprocess.run([launcher, *libm, "--stats", "true"], env=env, capture_output=True, text=True,
                                 check=False)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("asyncshim-settings not found; values are checked by the shim", out.stderr)
            out = subprocess.run([launcher, *libm, "--stream", "legacy", "true"], env=env, capture_output=True,
                                 text=True, check=False)
            self.assertEqual(out.returncode, 2)
            self.assertIn("cannot find asyncshim-settings", out.stderr)


class PrintLibrary(unittest.TestCase):
    def test_prints_the_library_it_would_preload(self):
        out = launch("--print-library")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, os.path.realpath(os.path.join(BUILD, "shim", "libasyncshim.so")) + "\n")
        libm = "/lib/x86_64-linux-gnu/libm.so.6"
        out = launch("--library", libm, "--print-library")
        self.assertEqual(out.stdout, os.path.realpath(libm) + "\n")
        out = launch("--print-library", env={"ASYNCSHIM_LIBRARY": "/nonexistent.so"})
        self.assertEqual(out.returncode, 2)
        self.assertIn("libasyncshim.so not found at /nonexistent.so", out.stderr)


class ExitStatus(unittest.TestCase):
    def test_program_status_is_returned(self):
        self.assertEqual(launch("sh", "-c", "exit 7").returncode, 7)
        self.assertEqual(launch("true").returncode, 0)

    def test_help_and_version(self):
        out = launch("--help")
        self.assertEqual(out.returncode, 0)
        self.assertIn("usage: asyncshim [options] [--] program [args...]", out.stdout)
        out = launch("--version")
        self.assertEqual(out.returncode, 0)
        self.assertRegex(out.stdout, r"^asyncshim \d+\.\d+\.\d+\n$")


if __name__ == "__main__":
    BUILD = sys.argv[1]
    unittest.main(argv=sys.argv[:1], verbosity=2)
