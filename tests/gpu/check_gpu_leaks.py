"""GPU tier: the leak report and the event log of a real run.

    python3 check_gpu_leaks.py SHIM LIFECYCLE_PROBE [ASYNCSHIM_REPLAY REPLAYER]

Runs `LIFECYCLE_PROBE exit-live` (five blocks of 256 B .. 64 MiB allocated
with cudaMalloc and never freed) under the shim with ASYNCSHIM_LEAK_REPORT,
ASYNCSHIM_LEAK_REPORT_FILE, ASYNCSHIM_LEAK_STACK_DEPTH=4 and
ASYNCSHIM_EVENT_LOG, and checks that the report lists exactly those blocks,
the largest first, each allocated from the probe's own code, and that the
event log has the same five allocations and no free; with the replay tool,
that replaying the log natively, on the raw pool and under the shim gives the
same peak with no failure. Prints "SKIP: ..." when there is no GPU.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True

MiB = 1 << 20
SIZES = [256, 4096, MiB, 16 * MiB, 64 * MiB]  # lifecycle_probe.cu, exit_live()


def main(shim, probe, replay=None, replayer=None):
    with tempfile.TemporaryDirectory() as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
        env.update(LD_PRELOAD=shim, ASYNCSHIM_LEAK_REPORT="1", ASYNCSHIM_LEAK_STACK_DEPTH="4",
                   ASYNCSHIM_LEAK_REPORT_FILE=os.path.join(d, "leaks-%p.json"),
                   ASYNCSHIM_EVENT_LOG=os.path.join(d, "events-%p.csv"))
        out = subprocess.run([probe, "exit-live"], env=env, capture_output=True, text=True, check=False)
        if "SKIP:" in out.stdout:
            print(out.stdout.strip())
            return 0
        if out.returncode != 0:
            sys.exit(f"FAIL: exit-live exited {out.returncode}:\n{out.stdout}{out.stderr}")
        files = sorted(os.listdir(d))
        leaks = [f for f in files if f.startswith("leaks-")]
        events = [f for f in files if f.startswith("events-")]
        if len(leaks) != 1 or len(events) != 1:
            sys.exit(f"FAIL: expected one report and one log, found {files}")
        with open(os.path.join(d, leaks[0])) as fh:
            report = json.load(fh)
        with open(os.path.join(d, events[0]), newline="") as fh:
            rows = list(csv.reader(fh.read().splitlines()))
        replayed = None
        if replay is not None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_") and k != "LD_PRELOAD"}
            r = subprocess.run([sys.executable, replay, os.path.join(d, events[0]), "--shim", shim, "--replayer",
                                replayer, "--export-json", os.path.join(d, "replay.json")],
                               env=env, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                sys.exit(f"FAIL: asyncshim-replay exited {r.returncode}:\n{r.stdout}{r.stderr}")
            with open(os.path.join(d, "replay.json")) as fh:
                replayed = json.load(fh)["results"]
    problems = []
    sizes = [b["bytes"] for b in report["blocks"]]
    if sizes != sorted(SIZES, reverse=True):
        problems.append(f"report sizes {sizes}, expected {sorted(SIZES, reverse=True)}")
    if report["bytes_live"] != sum(SIZES):
        problems.append(f"bytes_live {report['bytes_live']}, expected {sum(SIZES)}")
    for b in report["blocks"]:
        if b["entry_point"] != "cudaMalloc" or b["device"] != 0:
            problems.append(f"block {b}")
        if len(b["stack"]) != 4 or "lifecycle_probe" not in b["stack"][0]:
            problems.append(f"stack {b['stack']}")
    if "leak report: 5 blocks (81.0 MiB) still allocated at exit" not in out.stderr:
        problems.append("no leak report in the log:\n" + out.stderr)
    if rows[0] != ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]:
        problems.append(f"header {rows[0]}")
    allocations = [(r[3], int(r[4])) for r in rows[1:] if r[2] == "allocate"]
    if [s for _, s in allocations] != SIZES or any(r[2] != "allocate" for r in rows[1:]):
        problems.append(f"event log rows {rows[1:]}")
    if {int(p, 16) for p, _ in allocations} != {int(b["address"], 16) for b in report["blocks"]}:
        problems.append("the log's pointers are not the report's")
    for r in replayed or []:
        if r["log_peak_bytes"] != sum(SIZES) or r["failures"] != 0 or r["events"] != 5:
            problems.append(f"replay {r['configuration']}: {r}")
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        return 1
    print(f"leak report and event log: 5 blocks ({sum(SIZES)} bytes) reported, the largest first, "
          f"stacks from the probe; the log has the same 5 allocations"
          + (f"; replayed in {len(replayed)} configurations with the same peak, no failure" if replayed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
