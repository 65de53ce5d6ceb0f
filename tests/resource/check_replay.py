"""asyncshim-replay end to end on the CUDA runtime double (no GPU): a log in
the format RMM documents (epoch times, 0x pointers, "deallocate", "free",
"allocate failure" with "(nil)") and a log the shim's own event log wrote for
eight threads, each replayed natively, on the raw pool and under the shim;
the exports; a file that is not such a log.

    python3 check_replay.py ASYNCSHIM_REPLAY REPLAYER SHIM STATS_PROBE RMM_LOG
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True

REPLAY = REPLAYER = SHIM = PROBE = RMM_LOG = None


def replay(log, *extra, check=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
    out = subprocess.run([sys.executable, REPLAY, log, "--replayer", REPLAYER, "--shim", SHIM, *extra], env=env,
                         capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise AssertionError("asyncshim-replay exited %d:\n%s%s" % (out.returncode, out.stdout, out.stderr))
    return out


def replay_probe_log(what, **env):
    """asyncshim-replay of the event log stats_probe `what` wrote under the shim: its output and JSON export."""
    with tempfile.TemporaryDirectory() as d:
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
        run_env.update(LD_PRELOAD=SHIM, ASYNCSHIM_EVENT_LOG=os.path.join(d, "events.csv"), **env)
        subprocess.run([PROBE, what], env=run_env, capture_output=True, check=True)
        out = replay(os.path.join(d, "events.csv"), "--export-json", os.path.join(d, "r.json"))
        with open(os.path.join(d, "r.json")) as fh:
            return out, json.load(fh)


class Replay(unittest.TestCase):
    def test_a_log_in_the_format_rmm_documents(self):
        with tempfile.TemporaryDirectory() as d:
            out = replay(RMM_LOG, "--config", "ASYNCSHIM_ORDERING=sync", "--export-json", os.path.join(d, "r.json"),
                         "--export-markdown", os.path.join(d, "r.md"))
            with open(os.path.join(d, "r.json")) as fh:
                data = json.load(fh)
            with open(os.path.join(d, "r.md")) as fh:
                md = fh.read().splitlines()
        names = [r["configuration"] for r in data["results"]]
        self.assertEqual(names, ["native cudaMalloc", "raw pool", "shim defaults", "shim ASYNCSHIM_ORDERING=sync"])
        for r in data["results"]:
            self.assertEqual(r["events"], 6, r)  # 4 allocations, 2 frees; the failure is counted apart
            self.assertEqual(r["threads"], 2)
            self.assertEqual(r["failures_in_log"], 1)
            self.assertEqual(r["frees_without_allocation"], 0)
            self.assertEqual(r["log_peak_bytes"], 4096 + 65536 + 1048576)
            self.assertEqual(r["failures"], 0)
            self.assertGreater(r["seconds"], 0)
        shim_arms = data["results"][2:]
        for r in shim_arms:
            self.assertNotIn("problem", r)
            self.assertGreaterEqual(r["pool_reserved_high_bytes"], 4096 + 65536 + 1048576)
        self.assertEqual(shim_arms[1]["env"]["ASYNCSHIM_ORDERING"], "sync")
        self.assertEqual(md[0], "| Configuration | Time [ms] | Failures | Log peak | Device in use, peak | "
                                "Pool reserved high-water |")
        self.assertEqual(len(md), 2 + 4)
        self.assertIn("6 events from 2 threads (1 allocation failures in the log), the log's peak 1.1 MiB",
                      out.stdout)

    def test_a_log_the_shim_wrote(self):
        out, data = replay_probe_log("threads")
        for r in data["results"]:
            self.assertEqual((r["events"], r["threads"], r["failures"]), (32000, 8, 0), r)
            self.assertEqual(r["frees_without_allocation"], 0)
            # Each thread frees at once: at most one block of each thread's size is live.
            self.assertLessEqual(r["log_peak_bytes"], sum(256 * (t + 1) for t in range(8)))
        self.assertIn("32000 events from 8 threads", out.stdout)

    def test_pinned_host_memory_in_a_log_is_counted_not_replayed(self):
        out, data = replay_probe_log("pinned", ASYNCSHIM_HOST_POOL="1")
        for r in data["results"]:
            # The device's 5 allocations and 3 frees (the failure counted apart); 3 pinned lines left out.
            self.assertEqual((r["events"], r["failures_in_log"], r["pinned_in_log"]), (8, 1, 3), r)
            self.assertEqual(r["log_peak_bytes"], 1000 + 2000 + 3000 + 4000 + 5000)
        self.assertIn("3 lines of pinned host memory, not replayed", out.stdout)

    def test_not_an_event_log(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.csv")
            with open(bad, "w") as fh:
                fh.write("a,b,c\n1,2,3\n")
            out = replay(bad, check=False)
        self.assertEqual(out.returncode, 2)
        self.assertIn("the header has no Thread column (expected RMM's Thread,Time,Action,Pointer,Size,Stream)",
                      out.stderr)


if __name__ == "__main__":
    REPLAY, REPLAYER, SHIM, PROBE, RMM_LOG = sys.argv[1:6]
    unittest.main(argv=sys.argv[:1], verbosity=2)
