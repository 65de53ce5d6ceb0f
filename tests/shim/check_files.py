#!/usr/bin/env python3
"""The files the shim writes, and the processes it must not trust (SECURITY.md).

    check_files.py SHIM STATS_PROBE EXEC_PROBE LIST_FDS SECURE_PROBE DRIVER_DOUBLE RUNTIME_DOUBLE

ASYNCSHIM_LOG_FILE and ASYNCSHIM_STATS_FILE are never a symbolic link, a
directory, a FIFO, a file with other hard links or another user's file; new
files get mode 0644 under the umask, and an exec'd program inherits no
descriptor; a set-user-ID program run by another user reads none of its
ASYNCSHIM_* variables. The tests that need root (another user's file, the set-user-ID
program) say so and skip elsewhere; CI runs as root.
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

SHIM, STATS_PROBE, EXEC_PROBE, LIST_FDS, SECURE_PROBE, DRIVER_DOUBLE, RUNTIME_DOUBLE = sys.argv[1:8]
NOBODY = 65534


def run(program_args, umask=None, user=None, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
    env.update({"LD_PRELOAD": SHIM, "ASYNCSHIM_INITIAL_POOL_SIZE": "0"})
    env.update(variables)
    preexec = None
    if umask is not None:
        def preexec():
            os.umask(umask)
    if user is not None:
        program_args = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"] + program_args
    return subprocess.run(program_args, env=env, capture_output=True, text=True, timeout=30, preexec_fn=preexec)


def content(path):
    with open(path, "rb") as f:
        return f.read()


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="asyncshim-files-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def kept_file(self, name, text=b"not the shim's\n"):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(text)
        return path

    def assert_refused(self, target, reason, log_reason=None):
        """Both files pointed at `target`: the program runs, `target` is untouched, one message each."""
        before = content(target) if os.path.isfile(target) else None
        out = run([STATS_PROBE, "basic"], ASYNCSHIM_LOG_FILE=target, ASYNCSHIM_STATS_FILE=target,
                  ASYNCSHIM_LOG_LEVEL="info")
        self.assertEqual(out.returncode, 0, out.stderr)
        if before is not None:
            self.assertEqual(content(target), before)
        self.assertIn(f"ASYNCSHIM_LOG_FILE='{target}' is not used: {log_reason or reason} (asyncshim writes only "
                      "regular files of its own user, never a symbolic link or a file with other hard links); logging "
                      "to standard error", out.stderr)
        self.assertIn(f"ASYNCSHIM_STATS_FILE: the statistics are not written to '{target}': {reason}", out.stderr)
        self.assertEqual(out.stderr.count("ASYNCSHIM_LOG_FILE="), 1, out.stderr)
        self.assertEqual(out.stderr.count("ASYNCSHIM_STATS_FILE:"), 1, out.stderr)

    def test_a_symbolic_link_is_not_followed(self):
        target = self.kept_file("target")
        os.symlink(target, self.path("link"))
        self.assert_refused(self.path("link"), "it is a symbolic link")
        self.assertEqual(content(target), b"not the shim's\n")

    def test_a_dangling_symbolic_link_creates_nothing(self):
        os.symlink(self.path("nowhere"), self.path("link"))
        self.assert_refused(self.path("link"), "it is a symbolic link")
        self.assertFalse(os.path.exists(self.path("nowhere")))

    def test_a_directory_is_refused(self):
        os.mkdir(self.path("folder"))
        self.assert_refused(self.path("folder"), "it is a directory")

    def test_a_fifo_is_refused_without_waiting_for_a_reader(self):
        os.mkfifo(self.path("fifo"))
        self.assert_refused(self.path("fifo"), "it is a FIFO (named pipe), a socket or a device")

    def test_a_hard_link_to_another_file_is_refused(self):
        target = self.kept_file("precious")
        os.link(target, self.path("link"))
        self.assert_refused(self.path("link"), "it has other hard links")
        self.assertEqual(content(target), b"not the shim's\n")

    def test_another_users_file_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give a file to another user (CI runs as root)")
        target = self.kept_file("theirs")
        os.chown(target, NOBODY, NOBODY)
        os.chmod(target, 0o666)
        self.assert_refused(target, f"it belongs to another user (uid {NOBODY})")

    def test_own_files_are_replaced_and_appended(self):
        stats = self.kept_file("stats.json", b"old statistics that are longer than the new ones will be" * 100)
        log = self.kept_file("shim.log", b"an earlier line\n")
        out = run([STATS_PROBE, "basic"], ASYNCSHIM_LOG_FILE=log, ASYNCSHIM_STATS_FILE=stats, ASYNCSHIM_LOG_LEVEL="info")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(content(stats).startswith(b"{"), content(stats)[:80])
        self.assertNotIn(b"old statistics", content(stats))
        self.assertTrue(content(log).startswith(b"an earlier line\nasyncshim["), content(log)[:80])

    def test_new_files_have_mode_0644_under_the_umask(self):
        for umask, mode in ((0o022, 0o644), (0o077, 0o600)):
            log, stats = self.path(f"log-{umask:o}"), self.path(f"stats-{umask:o}.json")
            out = run([STATS_PROBE, "basic"], umask=umask, ASYNCSHIM_LOG_FILE=log, ASYNCSHIM_STATS_FILE=stats,
                      ASYNCSHIM_LOG_LEVEL="info")
            self.assertEqual(out.returncode, 0, out.stderr)
            for path in (log, stats):
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), mode, path)

    def test_an_execd_program_inherits_no_descriptor_of_the_shims(self):
        log = self.path("shim.log")
        out = run([EXEC_PROBE, LIST_FDS], ASYNCSHIM_LOG_FILE=log, ASYNCSHIM_LOG_LEVEL="info")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(os.path.getsize(log) > 0)  # the shim had its log open before the exec
        targets = [line.split(" ", 1)[1] for line in out.stdout.splitlines()]
        self.assertTrue(targets, "list_fds listed nothing")  # at least its own standard streams
        self.assertNotIn(log, targets)
        self.assertFalse([t for t in targets if t.startswith(self.dir)], targets)


class SecureExecution(unittest.TestCase):
    """A set-user-ID copy of a program, run by another user, with both files pointed at root's files."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to make a set-user-ID program and run it as another user (CI runs as root)")
        if shutil.which("setpriv") is None:
            self.skipTest("needs setpriv (util-linux) to run a program as another user")
        self.dir = tempfile.mkdtemp(prefix="asyncshim-secure-")
        os.chmod(self.dir, 0o755)  # the other user reaches the programs and libraries in it
        for source, name in ((SECURE_PROBE, "secure_probe"), (SHIM, "libasyncshim.so"),
                             (DRIVER_DOUBLE, "libcuda.so.1"), (RUNTIME_DOUBLE, "libcudart_double.so")):
            shutil.copy(source, os.path.join(self.dir, name))
        self.probe = os.path.join(self.dir, "secure_probe")
        self.log = os.path.join(self.dir, "roots.log")
        self.stats = os.path.join(self.dir, "roots-stats.json")
        for path in (self.log, self.stats):
            with open(path, "w") as f:
                f.write("root's own file\n")
            os.chmod(path, 0o644)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def files(self):
        return content(self.log), content(self.stats)

    def test_a_set_user_id_program_reads_no_asyncshim_variable(self):
        os.chmod(self.probe, 0o4755)
        before = self.files()
        out = run([self.probe, self.dir], user=NOBODY, LD_PRELOAD="", ASYNCSHIM_LOG_FILE=self.log,
                  ASYNCSHIM_STATS_FILE=self.stats, ASYNCSHIM_LOG_LEVEL="trace", ASYNCSHIM_SHOW_STATS="1")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("secure 1\n", out.stdout)
        self.assertIn("kind 1\n", out.stdout)  # everything passed through to the native allocator
        self.assertEqual(self.files(), before)
        self.assertNotIn("asyncshim", out.stderr)

    def test_the_same_program_without_set_user_id_uses_them(self):
        # The control: the probe loads the shim, and the shim writes where it is told.
        out = run([self.probe, self.dir], LD_PRELOAD="", ASYNCSHIM_LOG_FILE=self.log, ASYNCSHIM_STATS_FILE=self.stats,
                  ASYNCSHIM_LOG_LEVEL="info")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("secure 0\n", out.stdout)
        self.assertIn("kind 2\n", out.stdout)
        log, stats = self.files()
        self.assertTrue(log.startswith(b"root's own file\nasyncshim["), log[:80])
        self.assertTrue(stats.startswith(b"{"), stats[:80])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
