"""Driver-level interception under the CUDA test doubles: a program that
behaves as a statically linked runtime (dlopen libcuda.so.1, dlsym
cuGetProcAddress_v2, every entry point through it) run with and without
libasyncshim.so.

    python3 check_driver.py SHIM STATIC_RUNTIME_PROBE DRIVER_DOUBLE
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

SHIM = PROBE = DRIVER = None
# The allocation calls, the lookup itself, and a followed call the probe uses.
REPLACED = {"cuMemAlloc", "cuMemFree", "cuGetProcAddress", "cuCtxSynchronize"}


def run(check, shim=True, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_") and k != "LD_PRELOAD"}
    full["ASYNCSHIM_INITIAL_POOL_SIZE"] = "0"
    if shim:
        full["LD_PRELOAD"] = SHIM
    full.update(env)
    out = subprocess.run([PROBE, DRIVER, check], env=full, capture_output=True, text=True, check=False, timeout=60)
    return out


def lookups(text):
    """{name: (status, library)} from the probe's 'lookup NAME -> result R status S ... in LIB' lines."""
    found = {}
    for m in re.finditer(r"^lookup (\S+)(?: per-thread)? -> result (\d+) status (\d+).* in (\S+)$", text, re.M):
        found.setdefault(m.group(1), (int(m.group(3)), m.group(4)))
    return found


class StaticRuntime(unittest.TestCase):
    def test_allocations_come_from_the_pool(self):
        out = run("basic", ASYNCSHIM_REUSE_CACHE="0")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(re.findall(r"^alloc \d: ok kind (\d)$", out.stdout, re.M), ["2"] * 4)
        self.assertIn("data ok", out.stdout)
        self.assertIn("summary: allocations 4 pool 4 driver 0", out.stdout)
        self.assertIn("live allocations: 0", out.stdout)  # all back in the pool after the synchronization

    def test_freed_blocks_are_kept_for_reuse(self):
        # The cache keeps sizes allocated again: the four sizes' second blocks.
        out = run("twice", ASYNCSHIM_REUSE_CACHE="1GiB", ASYNCSHIM_IN_ORDER_FREES="off")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("summary: allocations 8 pool 8 driver 0", out.stdout)
        self.assertIn("live allocations: 4", out.stdout)  # in the reuse cache, still the pool's

    def test_only_the_replaced_functions_are_the_shims(self):
        out = run("basic")
        found = lookups(out.stdout)
        self.assertGreaterEqual(len(found), 10)
        for name, (status, library) in found.items():
            self.assertEqual(status, 0, name)  # symbolStatus filled by the driver
            expected = "libasyncshim.so" if name in REPLACED else "libcuda.so.1"
            self.assertEqual(library, expected, f"{name} resolved in {library}")

    def test_without_the_shim_nothing_changes_hands(self):
        out = run("basic", shim=False)
        self.assertIn("summary: allocations 4 pool 0 driver 4", out.stdout)
        self.assertTrue(all(lib == "libcuda.so.1" for _, lib in lookups(out.stdout).values()))

    def test_self_lookup_and_direct_dlsym(self):
        for check in ("self-lookup", "dlsym-direct"):
            out = run(check)
            self.assertEqual(out.returncode, 0, check + out.stdout + out.stderr)
            self.assertIn("summary: allocations 4 pool 4 driver 0", out.stdout, check)

    def test_unknown_symbols_answer_as_natively(self):
        native, shimmed = run("unknown", shim=False), run("unknown")
        self.assertEqual(native.returncode, shimmed.returncode)
        self.assertEqual(native.stdout, shimmed.stdout)

    def test_runtime_only_interception_leaves_the_driver_alone(self):
        out = run("basic", ASYNCSHIM_INTERCEPT="runtime")
        self.assertIn("summary: allocations 4 pool 0 driver 4", out.stdout)
        # The allocation entry points stay the driver's; cuGetProcAddress and
        # the followed calls are still the shim's, which follows streams,
        # captures and synchronizations at every level.
        for name, (_, lib) in lookups(out.stdout).items():
            followed = name in ("cuGetProcAddress", "cuCtxSynchronize")
            self.assertEqual(lib, "libasyncshim.so" if followed else "libcuda.so.1", name)

    def test_disabled_shim_leaves_the_driver_alone(self):
        out = run("basic", ASYNCSHIM_DISABLE="1")
        self.assertIn("summary: allocations 4 pool 0 driver 4", out.stdout)

    def test_disabled_shim_says_nothing_at_the_default_level(self):
        out = run("basic", ASYNCSHIM_DISABLE="1")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("asyncshim", out.stderr)
        out = run("basic", ASYNCSHIM_DISABLE="1", ASYNCSHIM_LOG_LEVEL="info")
        self.assertIn("ASYNCSHIM_DISABLE", out.stderr)  # says why when asked

    def test_log_level_off_says_nothing_at_all(self):
        bad = {"ASYNCSHIM_RELEASE_THRESHOLD": "lots", "ASYNCSHIM_STREEM": "legacy"}
        out = run("basic", ASYNCSHIM_LOG_LEVEL="off", **bad)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("asyncshim", out.stderr)
        out = run("basic", **bad)  # at the default level they are said
        self.assertIn("ASYNCSHIM_RELEASE_THRESHOLD='lots' is not a valid size", out.stderr)
        self.assertIn("unknown variable ASYNCSHIM_STREEM", out.stderr)

    def test_statistics_name_the_entry_point(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "stats.json")
            out = run("basic", ASYNCSHIM_STATS_FILE=path)
            self.assertEqual(out.returncode, 0, out.stderr)
            with open(path, encoding="utf-8") as f:
                stats = json.load(f)
        dev = stats["devices"][0]
        self.assertEqual(dev["allocations_by_entry_point"], {"cudaMalloc": 0, "cuMemAlloc_v2": 4, "cudaMallocPitch": 0, "cudaMalloc3D": 0, "cuMemAllocPitch_v2": 0})
        self.assertEqual((dev["allocations"], dev["frees"]), (4, 4))
        self.assertGreater(dev["time_in_calls_ns"]["cuMemAlloc_v2"], 0)
        self.assertGreater(dev["time_in_calls_ns"]["cuMemFree_v2"], 0)

    def test_trace_log_lists_the_lookups(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "trace.log")
            run("basic", ASYNCSHIM_LOG_LEVEL="trace", ASYNCSHIM_LOG_FILE=log)
            with open(log, encoding="utf-8") as f:
                text = f.read()
        self.assertRegex(text, r'cuGetProcAddress_v2\("cuMemAlloc", version 13000, flags 0\) = CUDA_SUCCESS \(0: no error\): replaced by asyncshim')
        self.assertRegex(text, r'cuGetProcAddress_v2\("cuInit", version 13000, flags 0\) = CUDA_SUCCESS \(0: no error\)\n')


if __name__ == "__main__":
    SHIM, PROBE, DRIVER = sys.argv[1], sys.argv[2], sys.argv[3]
    unittest.main(argv=sys.argv[:1], verbosity=2)
