#!/usr/bin/env python3
"""Runs GPU-tier tests against a deliberately broken shim: each must fail.

    break_check.py BUILD BREAK [--regex R] [--exclude R]

BREAK is one of:
  no-load  the shim's file is not a library (the loader ignores it and the
           program runs natively);
  disabled the shim is disabled by an invalid variable (ASYNCSHIM_IDLE_RELEASE=bogus,
           which no test sets);
  fence    the shim's fence leaves one stream out (the test-only build
           libasyncshim_fence_drops_a_stream.so), every free fenced
           (ASYNCSHIM_IN_ORDER_FREES=off).
The shim file is put back afterwards. Every selected test whose command runs
the shim must fail, never pass or skip; tests that
do not run the shim are left out. Prints one line per test and a summary;
exits 1 when the break went unseen.
"""
import os
import re
import shutil
import subprocess
import sys


def shim_tests(build, regex, exclude):
    """Names of the selected GPU tests whose command preloads the shim."""
    args = ["ctest", "--test-dir", build, "-L", "gpu", "-N", "-V"]
    if regex:
        args += ["-R", regex]
    if exclude:
        args += ["-E", exclude]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    names = []
    command = ""
    for line in out.splitlines():
        m = re.search(r"Test command: (.*)", line)
        if m:
            command = m.group(1)
            continue
        m = re.match(r"\s*Test\s+#\d+: (\S+)", line)
        if m:
            if "libasyncshim" in command:
                names.append(m.group(1))
            command = ""
    return names


def run(build, names, env):
    pattern = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    out = subprocess.run(
        ["ctest", "--test-dir", build, "-R", pattern, "--parallel", "4", "--timeout", "300"],
        capture_output=True, text=True, env=env).stdout
    results = {}
    for line in out.splitlines():
        m = re.search(r"Test\s+#\d+: (\S+) \.+\s*(\*\*\*)?(Passed|Failed|Skipped|Timeout|Not Run|Exception)", line)
        if m:
            results[m.group(1)] = m.group(3)
    return results


def main():
    argv = sys.argv[1:]
    if len(argv) < 2 or argv[1] not in ("no-load", "disabled", "fence"):
        print(__doc__, file=sys.stderr)
        return 2
    build, kind = argv[0], argv[1]
    regex = exclude = None
    if "--regex" in argv:
        regex = argv[argv.index("--regex") + 1]
    if "--exclude" in argv:
        exclude = argv[argv.index("--exclude") + 1]
    names = shim_tests(build, regex, exclude)
    if not names:
        print(f"break_check: {kind}: no test that runs the shim was selected")
        return 1
    shim = os.path.join(build, "shim", "libasyncshim.so")
    saved = shim + ".saved"
    env = dict(os.environ)
    shutil.copy2(shim, saved)
    try:
        if kind == "no-load":
            shutil.copy2("/bin/true", shim)
        elif kind == "fence":
            shutil.copy2(os.path.join(build, "shim", "libasyncshim_fence_drops_a_stream.so"), shim)
            env["ASYNCSHIM_IN_ORDER_FREES"] = "off"  # every free fenced
        else:
            env["ASYNCSHIM_IDLE_RELEASE"] = "bogus"
        results = run(build, names, env)
    finally:
        shutil.move(saved, shim)
    unseen = []
    for name in names:
        verdict = results.get(name, "not run")
        print(f"break_check: {kind}: {name}: {verdict}")
        if verdict != "Failed" and verdict != "Timeout":
            unseen.append(name)
    failed = len(names) - len(unseen)
    print(f"break_check: {kind}: {failed} of {len(names)} shim tests failed; "
          f"passed or skipped: {', '.join(unseen) if unseen else 'none'}")
    return 1 if unseen else 0


if __name__ == "__main__":
    sys.exit(main())
