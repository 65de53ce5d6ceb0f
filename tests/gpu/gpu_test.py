#!/usr/bin/env python3
"""Runs one GPU-tier test and gives ctest a verdict it cannot misread.

    gpu_test.py --devices FILE --detector PROGRAM [options] -- COMMAND [ARGS...]
    gpu_test.py --devices FILE --detector PROGRAM --detect

Whether this machine has a CUDA device is decided without the shim: PROGRAM
(gpu_devices) runs with LD_PRELOAD and every ASYNCSHIM_* variable removed, and
its answer is kept in FILE (the gpu.devices fixture writes it first; a test run
on its own writes it if it is missing). Without a device, or with fewer than
--need-devices, the test prints "gpu-test: SKIP: <reason>" and exits 0, without
running COMMAND. With enough devices, COMMAND runs and the test passes only if:

- it exits with --exit (default 0);
- its output (standard output and error) holds no "SKIP: " line, unless the
  line matches an --allow-skip expression (torch not installed, not root...),
  in which case the test is skipped with that reason: a program that cannot
  reach the device it was given under the shim has failed;
- its output matches every --stdout expression and no --fail expression
  (default: "FAIL|WRONG", what the probes print when a check fails);
- with --shim (preloaded into COMMAND) or --stats, the statistics files that
  the shim wrote (ASYNCSHIM_STATS_FILE, one per process) match the schema,
  and one of them makes every --stats expression true (default with --shim:
  it served allocations). Expressions see `s` (the document), `d` (its first
  device, {} when none) and `dev(n)` (device n, {} when absent). A shim that
  did not load, or that an invalid setting disabled, writes no file.

The verdict is the last line: "gpu-test: passed", "gpu-test: FAIL: ..." (exit
1) or "gpu-test: SKIP: ..." (exit 0). Only the last matches the tests'
SKIP_REGULAR_EXPRESSION, so a "SKIP: " the program printed cannot turn a failure
into a skip.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import stats_schema  # noqa: E402

DEFAULT_FAIL = r"FAIL|WRONG"
SHIM_SERVED = 'd.get("allocations", 0) > 0'


def native_environment():
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("ASYNCSHIM_")}


def detect(detector, devices_file):
    """Runs the detector natively and writes {"count": N, "reason": ...} to devices_file."""
    try:
        out = subprocess.run([detector], env=native_environment(), capture_output=True, text=True, timeout=120,
                             check=False)
        text = (out.stdout + out.stderr).strip()
        match = re.search(r"^gpu_devices: (\d+)(.*)$", out.stdout, re.M)
        if out.returncode == 0 and match:
            found = {"count": int(match.group(1)), "reason": match.group(2).strip(" ()")}
        else:
            found = {"count": 0, "reason": f"{detector} exited {out.returncode}: {text[-300:]}"}
    except (OSError, subprocess.TimeoutExpired) as e:
        found = {"count": 0, "reason": f"{detector} could not run: {e}"}
    os.makedirs(os.path.dirname(os.path.abspath(devices_file)), exist_ok=True)
    with open(devices_file + ".part", "w", encoding="utf-8") as f:
        json.dump(found, f)
    os.replace(devices_file + ".part", devices_file)
    return found


def devices(args):
    try:
        with open(args.devices, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return detect(args.detector, args.devices)


def verdict(kind, why=""):
    print(f"gpu-test: {kind}{': ' + why if why else ''}", flush=True)
    return 1 if kind == "FAIL" else 0


def check_statistics(directory, expressions):
    """None when some statistics file makes every expression true, else why not."""
    paths = sorted(glob.glob(os.path.join(directory, "*.json")))
    if not paths:
        return "the shim wrote no statistics file (it did not load, was disabled, or served nothing)"
    seen = []
    for path in paths:
        try:
            doc = stats_schema.load_and_validate(path)
        except stats_schema.StatsSchemaError as e:
            return f"{os.path.basename(path)}: {e}"
        by_device = {x["device"]: x for x in doc["devices"]}
        scope = {"s": doc, "d": doc["devices"][0] if doc["devices"] else {}, "dev": lambda n: by_device.get(n, {})}
        false = []
        for expression in expressions:
            try:
                if not eval(expression, {"__builtins__": {"all": all, "any": any, "len": len}}, scope):  # noqa: S307
                    false.append(expression)
            except (KeyError, IndexError, TypeError) as e:
                false.append(f"{expression} ({type(e).__name__}: {e})")
        if not false:
            print(f"gpu-test: statistics: {os.path.basename(path)} shows {'; '.join(expressions)}")
            return None
        seen.append(f"{os.path.basename(path)} (mode {doc['mode']}, devices "
                    f"{json.dumps(doc['devices'])}): not {'; not '.join(false)}")
    return "no statistics file shows it: " + " | ".join(seen)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", required=True, help="where the native device count is kept")
    parser.add_argument("--detector", required=True, help="the gpu_devices program")
    parser.add_argument("--detect", action="store_true", help="only decide (again) whether a device exists")
    parser.add_argument("--need-devices", type=int, default=1)
    parser.add_argument("--shim", help="preload this library into the command")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--stats", action="append", default=[], metavar="EXPRESSION")
    parser.add_argument("--allow-skip", action="append", default=[], metavar="REGEX")
    parser.add_argument("--exit", type=int, default=0, dest="expected_exit")
    parser.add_argument("--stdout", action="append", default=[], metavar="REGEX")
    parser.add_argument("--fail", action="append", default=None, metavar="REGEX")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()

    if args.detect:
        found = detect(args.detector, args.devices)
        print(f"gpu-test: {found['count']} CUDA device(s), decided without the shim"
              + (f" ({found['reason']})" if found["reason"] else ""))
        return 0
    if not args.command:
        parser.error("no command")
    found = devices(args)
    if found["count"] == 0:
        return verdict("SKIP", f"no CUDA device ({found['reason'] or 'none found'}; decided without the shim)")
    if found["count"] < args.need_devices:
        return verdict("SKIP", f"needs {args.need_devices} CUDA devices, this machine has {found['count']}")

    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for pair in args.env:
        name, _, value = pair.partition("=")
        env[name] = value
    if args.shim:
        env["LD_PRELOAD"] = args.shim
    expressions = list(args.stats) or ([SHIM_SERVED] if args.shim else [])
    stats_dir = tempfile.mkdtemp(prefix="gpu-test-stats.") if expressions else None
    try:
        if stats_dir:
            os.chmod(stats_dir, 0o1777)  # a process the test runs as another user (gpu.ipc.other_user) writes here too
            env["ASYNCSHIM_STATS_FILE"] = os.path.join(stats_dir, "stats-%p.json")
        out = subprocess.run(args.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace", check=False)
        sys.stdout.write(out.stdout)
        if out.stdout and not out.stdout.endswith("\n"):
            sys.stdout.write("\n")
        text = out.stdout
        skips = re.findall(r"SKIP: ([^\n]*)", text)
        allowed = [s for s in skips if any(re.search(a, s) for a in args.allow_skip)]
        if allowed and len(allowed) == len(skips) and out.returncode in (0, 77):
            return verdict("SKIP", allowed[0])
        problems = []
        if out.returncode != args.expected_exit:
            problems.append(f"exit status {out.returncode}, expected {args.expected_exit}")
        for skip in skips:
            if skip not in allowed:
                problems.append(f"it skipped ('{skip}') on a machine with {found['count']} CUDA device(s)")
        for regex in args.stdout:
            if not re.search(regex, text):
                problems.append(f"its output does not match '{regex}'")
        for regex in DEFAULT_FAIL.split("|") if args.fail is None else args.fail:
            hit = re.search(regex, text) if regex else None
            if hit:
                line = text[text.rfind("\n", 0, hit.start()) + 1:].split("\n", 1)[0]
                problems.append(f"its output says '{line.strip()}'")
        if expressions and not problems:
            why = check_statistics(stats_dir, expressions)
            if why:
                problems.append(why)
        if problems:
            return verdict("FAIL", "; ".join(problems))
        return verdict("passed")
    finally:
        if stats_dir:
            shutil.rmtree(stats_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
