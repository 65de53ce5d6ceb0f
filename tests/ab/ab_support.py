"""Shared helpers for the asyncshim-ab tests (standard library only).

The wrapper is tested without a real shim and without a GPU:
  - the "shim" is a harmless real shared library that is already loaded into
    every Python process (libm, else libc, found in /proc/self/maps), so
    LD_PRELOAD works without the dynamic loader complaining;
  - the program is tests/ab/fake_program.py, which sleeps for a controlled
    time and writes a statistics file like the shim's itself.
"""

import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "scripts", "asyncshim-ab")
FAKE = os.path.join(HERE, "fake_program.py")
FAKE_PROGRAM = [sys.executable, "-S", FAKE]

_module = None


def load_ab():
    """Import scripts/asyncshim-ab (no .py suffix) as a module."""
    global _module
    if _module is None:
        sys.dont_write_bytecode = True  # leave no scripts/__pycache__ behind
        loader = importlib.machinery.SourceFileLoader("asyncshim_ab", SCRIPT)
        spec = importlib.util.spec_from_loader("asyncshim_ab", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        _module = module
    return _module


def loaded_library(pattern):
    """Path of a shared library mapped into this process whose file name
    matches the regular expression, or None."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 6:
                    path = parts[5]
                    if re.search(pattern, os.path.basename(path)) and os.path.isfile(path):
                        return path
    except OSError:
        pass
    return None


def harmless_library():
    """A real shared library that is safe to LD_PRELOAD (it is loaded anyway)."""
    import math  # noqa: F401  (make sure libm is mapped where math needs it)
    for pattern in (r"^libm\.so", r"^libc\.so"):
        path = loaded_library(pattern)
        if path:
            return path
    for path in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                 "/lib64/libm.so.6", "/usr/lib64/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6"):
        if os.path.isfile(path):
            return path
    return None


def clean_environment(extra=None):
    """The test process's environment without anything that would steer the
    wrapper or the fake program, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("ASYNCSHIM_") or k.startswith("FAKE_") or k == "LD_PRELOAD")}
    env.update(extra or {})
    return env


class AbTestCase(unittest.TestCase):
    """Runs the wrapper as a command in a temporary folder."""

    def setUp(self):
        self.shim = harmless_library()
        if self.shim is None:
            self.skipTest("no shared library found to stand in for libasyncshim.so")
        self._tmp = tempfile.TemporaryDirectory(prefix="asyncshim-ab-test-")
        self.tmp = self._tmp.name
        self.log = os.path.join(self.tmp, "invocations.jsonl")

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)

    def run_ab(self, options, env=None, program=None, shim=True, timeout=120):
        """Run `asyncshim-ab [--shim S] options -- program`; returns the
        CompletedProcess (text)."""
        argv = [sys.executable, SCRIPT]
        if shim:
            argv += ["--shim", self.shim]
        argv += list(options)
        if program is not False:
            argv += ["--"] + list(program or FAKE_PROGRAM)
        full_env = clean_environment(dict({"FAKE_LOG": self.log}, **(env or {})))
        return subprocess.run(argv, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout, cwd=self.tmp)

    def invocations(self):
        """One dict per run of the fake program, in order (warm-ups included)."""
        if not os.path.exists(self.log):
            return []
        with open(self.log) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def read_json(self, name):
        with open(self.path(name)) as fh:
            return json.load(fh)

    def assertExit(self, proc, code):
        self.assertEqual(proc.returncode, code,
                         "exit status %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s"
                         % (proc.returncode, code, proc.stdout, proc.stderr))
