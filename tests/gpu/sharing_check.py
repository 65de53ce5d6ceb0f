#!/usr/bin/env python3
"""A shared GPU, natively and under the shim with its default settings.

    sharing_check.py --shim LIB --probe SHARING_PROBE [--device N] CHECK [CHECK...]

Checks (each prints one line per run it makes, "sharing: <check> ...", and
fails the script when the shim's run is not what the native run is):
  meminfo           free memory as the program sees it (runtime, driver and a
                    cuGetProcAddress lookup) at each stage of a short run:
                    under the shim within 64 MiB of the native figure
  torch-meminfo     torch.cuda.mem_get_info() after a 1 MiB tensor, with
                    PyTorch's caching allocator and without: within 64 MiB
  idle-neighbour    a process that allocated and freed 1 MiB waits; a native
                    neighbour allocates 100 GiB
  turns             two processes take turns at 80 GiB each, 3 rounds each
  together-N        N processes start at the same moment and each allocates
                    64 MiB ten times: all succeed, and under the shim none
                    falls back to the native allocator (statistics)
--device N runs meminfo on device N (the probe's cudaSetDevice(N) first; it
skips, saying why, where there is no device N); without it the runtime's
default device, as before. meminfo only.
--before adds each check's run with the settings the shim had before
(ASYNCSHIM_INITIAL_POOL_SIZE=half-free ASYNCSHIM_IDLE_RELEASE=off), or with
--before-library LIB an earlier build of the shim with its own defaults, for
the record only: it never fails the script.
Exits 0 when every check passed (or skipped: no GPU, no PyTorch), 1 otherwise.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20
GiB = 1 << 30
BEFORE = {"ASYNCSHIM_INITIAL_POOL_SIZE": "half-free", "ASYNCSHIM_IDLE_RELEASE": "off"}


BEFORE_LIBRARY = None  # --before-library


def environment(arm, shim):
    """The environment of a run: native, the shim's defaults, or its former defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_") and k != "LD_PRELOAD"}
    if arm != "native":
        env["LD_PRELOAD"] = shim
    if arm == "shim" and "ASYNCSHIM_STATS_FILE" in os.environ:  # the test's proof that the shim served
        env["ASYNCSHIM_STATS_FILE"] = os.environ["ASYNCSHIM_STATS_FILE"]
    if arm == "before":
        if BEFORE_LIBRARY:
            env["LD_PRELOAD"] = BEFORE_LIBRARY
        else:
            env.update(BEFORE)
    return env


def start(command, env, **kwargs):
    return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def meminfo(args, arm):
    """{stage: (runtime, driver, lookup, total)} of one run of the probe."""
    device = ["--device", str(args.device)] if args.device is not None else []
    out = subprocess.run([args.probe, *device, "meminfo"], env=environment(arm, args.shim), capture_output=True,
                         text=True, timeout=120)
    stages = {}
    for line in out.stdout.splitlines():
        words = line.split()
        if words[:1] == ["meminfo"]:
            stages[words[1]] = tuple(int(words[i]) for i in (3, 5, 7, 9))
    return out.returncode, stages, out.stdout + out.stderr


def check_meminfo(args, arms):
    code, native, text = meminfo(args, "native")
    if "SKIP" in text:
        if args.device is None:
            return "skip", "no GPU"
        # The probe's own reason: no GPU at all, or no device N.
        reasons = [line[len("SKIP: "):] for line in text.splitlines() if line.startswith("SKIP: ")]
        return "skip", reasons[0] if reasons else f"no device {args.device}"
    if code != 0 or not native:
        return "fail", f"the native run failed: {text.strip()}"
    verdict = "pass"
    for arm in arms:
        code, shim, text = meminfo(args, arm)
        worst = 0
        lines = []
        for stage, (runtime, driver, lookup, total) in native.items():
            got = shim.get(stage)
            if got is None:
                lines.append(f"{stage}: missing")
                worst = max(worst, total)
                continue
            differences = [abs(got[i] - runtime) for i in range(3)]
            worst = max(worst, *differences)
            lines.append(f"{stage} {runtime / GiB:.2f}/{got[0] / GiB:.2f}")
        ok = code == 0 and worst <= 64 * MiB
        where = f" on device {args.device}" if args.device is not None else ""
        print(f"sharing: meminfo{where} ({arm}): {'PASS' if ok else 'FAIL'}: native/shim free GiB by stage: "
              f"{', '.join(lines)}; largest difference {worst / MiB:.0f} MiB (runtime, driver and lookup)")
        if not ok and arm == "shim":
            verdict = "fail"
    return verdict, ""


TORCH_SNIPPET = r"""
import torch
torch.cuda.init()
x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print("mem_get_info", free, total)
"""


def check_torch_meminfo(args, arms):
    try:
        import torch  # noqa: F401
    except ImportError:
        return "skip", "no PyTorch"
    verdict = "pass"
    for caching in ("caching", "uncached"):
        figures = {}
        for arm in ["native"] + arms:
            env = environment(arm, args.shim)
            if caching == "uncached":
                env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
            out = subprocess.run([sys.executable, "-c", TORCH_SNIPPET], env=env, capture_output=True, text=True,
                                 timeout=300)
            words = [line.split() for line in out.stdout.splitlines() if line.startswith("mem_get_info")]
            figures[arm] = int(words[0][1]) if words else None
        native = figures["native"]
        for arm in arms:
            got = figures[arm]
            ok = native is not None and got is not None and abs(got - native) <= 64 * MiB
            print(f"sharing: torch-meminfo {caching} ({arm}): {'PASS' if ok else 'FAIL'}: "
                  f"torch.cuda.mem_get_info() free {fmt(native)} natively, {fmt(got)} under the shim")
            if not ok and arm == "shim":
                verdict = "fail"
    return verdict, ""


def fmt(value):
    return "?" if value is None else f"{value / GiB:.2f} GiB"


def check_idle_neighbour(args, arms):
    verdict = "pass"
    for arm in ["native"] + arms:
        idle = start([args.probe, "idle", str(MiB)], environment(arm, args.shim))
        line = idle.stdout.readline()
        if "SKIP" in line:
            idle.communicate()
            return "skip", "no GPU"
        neighbour = subprocess.run([args.probe, "allocate", str(100 * GiB)], env=environment("native", args.shim),
                                   capture_output=True, text=True, timeout=120)
        idle.communicate(timeout=60)
        ok = "waiting" in line and neighbour.returncode == 0
        print(f"sharing: idle-neighbour ({arm}): {'PASS' if ok else 'FAIL'}: a process that allocated and freed "
              f"1 MiB waits; a native neighbour's 100 GiB: {neighbour.stdout.strip().splitlines()[-1:]}")
        if not ok and arm in ("native", "shim"):
            verdict = "fail"
    return verdict, ""


def check_turns(args, arms, rounds=3):
    verdict = "pass"
    for arm in ["native"] + arms:
        players = [start([args.probe, "turns", str(80 * GiB)], environment(arm, args.shim)) for _ in range(2)]
        if any("SKIP" in player.stdout.readline() for player in players):
            for player in players:
                player.communicate()
            return "skip", "no GPU"
        results = []
        for _ in range(rounds):
            for player in players:
                player.stdin.write("go\n")
                player.stdin.flush()
                results.append(player.stdout.readline().strip())
        for player in players:
            player.communicate(timeout=60)
        ok = results == ["turn ok"] * (2 * rounds) and all(p.returncode == 0 for p in players)
        print(f"sharing: turns ({arm}): {'PASS' if ok else 'FAIL'}: two processes, 80 GiB each in turn, "
              f"{rounds} rounds: {', '.join(results)}")
        if not ok and arm in ("native", "shim"):
            verdict = "fail"
    return verdict, ""


def check_together(args, arms, count):
    verdict = "pass"
    for arm in ["native"] + arms:
        with tempfile.TemporaryDirectory() as stats_dir:
            env = environment(arm, args.shim)
            if arm != "native":
                env["ASYNCSHIM_STATS_FILE"] = os.path.join(stats_dir, "stats-%p.json")
            procs = [start([args.probe, "together", str(64 * MiB)], env) for _ in range(count)]
            ready = [p.stdout.readline().strip() for p in procs]
            if any("SKIP" in r for r in ready):
                for p in procs:
                    p.communicate()
                return "skip", "no GPU"
            for p in procs:  # the same moment, as near as a loop of writes gets
                p.stdin.write("go\n")
                p.stdin.flush()
            outcomes = [p.communicate(timeout=300) for p in procs]
            failed = sum(1 for p in procs if p.returncode != 0)
            fell_back = 0
            no_pool = 0
            records = glob.glob(os.path.join(stats_dir, "stats-*.json"))
            for path in records:
                with open(path) as f:
                    for device in json.load(f)["devices"]:
                        fell_back += device["passed_through"]["total"]
            for _, err in outcomes:
                no_pool += err.count("cannot create the asyncshim pool")
            ok = failed == 0 and (arm == "native" or (len(records) == count and fell_back == 0 and no_pool == 0))
            detail = f"{count} processes at once: {count - failed} succeeded"
            if arm != "native":
                detail += (f", {len(records)} statistics files, {fell_back} allocations passed through, "
                           f"{no_pool} pools not created")
            print(f"sharing: together-{count} ({arm}): {'PASS' if ok else 'FAIL'}: {detail}")
            if not ok and arm in ("native", "shim"):
                verdict = "fail"
    return verdict, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shim", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--before", action="store_true", help="also run with the former defaults (for the record)")
    parser.add_argument("--before-library", help="with --before: an earlier build of the shim, with its defaults")
    parser.add_argument("--device", type=int, help="meminfo on this device (the probe's cudaSetDevice first)")
    parser.add_argument("checks", nargs="+")
    args = parser.parse_args()
    if args.device is not None and (args.device < 0 or any(check != "meminfo" for check in args.checks)):
        parser.error("--device takes a device number and goes with meminfo only")
    global BEFORE_LIBRARY
    BEFORE_LIBRARY = args.before_library
    arms = ["shim"] + (["before"] if args.before else [])
    failed = False
    for check in args.checks:
        if check == "meminfo":
            verdict, why = check_meminfo(args, arms)
        elif check == "torch-meminfo":
            verdict, why = check_torch_meminfo(args, arms)
        elif check == "idle-neighbour":
            verdict, why = check_idle_neighbour(args, arms)
        elif check == "turns":
            verdict, why = check_turns(args, arms)
        elif check.startswith("together-"):
            verdict, why = check_together(args, arms, int(check.split("-")[1]))
        else:
            parser.error(f"unknown check {check}")
        if verdict == "skip":
            print(f"SKIP: {check}: {why}")
        failed = failed or verdict == "fail"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
