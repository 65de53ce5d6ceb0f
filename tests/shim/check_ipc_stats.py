"""The legacy IPC counts of the statistics (devices[i].legacy_ipc), under the
CUDA test doubles: ipc_probe's "share N" gives one block a handle in the
parent, and each of its N children opens it once.

    python3 check_ipc_stats.py SHIM IPC_PROBE
"""
import glob
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import stats_schema  # noqa: E402


def main():
    shim, probe = sys.argv[1:3]
    children = 3
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, LD_PRELOAD=shim, ASYNCSHIM_INITIAL_POOL_SIZE="0",
                   ASYNCSHIM_STATS_FILE=os.path.join(d, "stats-%p.json"))
        out = subprocess.run([probe, "share", str(children)], env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"ipc_probe share exited {out.returncode}:\n{out.stdout}{out.stderr}")
            return 1
        counts = []
        for path in sorted(glob.glob(os.path.join(d, "stats-*.json"))):
            doc = stats_schema.load_and_validate(path)
            ipc = [device["legacy_ipc"] for device in doc["devices"]]
            counts.append((sum(i["exported_blocks"] for i in ipc), sum(i["imported_blocks"] for i in ipc)))
    expected = sorted([(1, 0)] + [(0, 1)] * children)
    if sorted(counts) != expected:
        print(f"(exported, imported) per process: {sorted(counts)}, expected {expected}")
        return 1
    print(f"legacy IPC counts as expected: {sorted(counts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
