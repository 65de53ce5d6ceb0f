"""The metrics file (ASYNCSHIM_METRICS_FILE): read while stats_probe waits,
parsed with Prometheus's own parser (python3-prometheus-client), its values
matched against the statistics file the same process writes at exit, and gone
once the process has exited.

    python3 check_metrics.py SHIM STATS_PROBE
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # Debian's package, where python3 is not Debian's own
    sys.path.append("/usr/lib/python3/dist-packages")
    from prometheus_client.parser import text_string_to_metric_families

SHIM = PROBE = None
LIMIT = 1 << 30


def samples(text):
    """{(sample name, frozenset of labels): value} of a metrics file."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


class MetricsFile(unittest.TestCase):
    def test_values_match_the_statistics_and_the_file_goes_at_exit(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="64MiB",
                       ASYNCSHIM_METRICS_FILE=os.path.join(d, "asyncshim-%p.prom"),
                       ASYNCSHIM_METRICS_INTERVAL="20ms", ASYNCSHIM_MEMORY_LIMIT="1GiB", ASYNCSHIM_HOST_POOL="1",
                       ASYNCSHIM_STATS_FILE=os.path.join(d, "stats-%p.json"))
            probe = subprocess.Popen([PROBE, "wait"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
            pid = int(probe.stdout.readline().split()[1])
            self.assertEqual(probe.stdout.readline().strip(), "ready")
            path = os.path.join(d, f"asyncshim-{pid}.prom")
            labels = {"device": "0", "pid": str(pid), "program": "stats_probe"}

            def key(name, **extra):
                return (name, frozenset(dict(labels, **extra).items()))

            # Written again every 20 ms, each time a new file renamed over the last. A file
            # written after the probe's calls may hold figures read before them; the next one
            # holds figures read after it was written (its time stamp comes from a clock that
            # may lag, never lead).
            ready_ns = time.time_ns()
            found = {}
            first = None
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    st = os.stat(path)
                    if first is None and st.st_mtime_ns > ready_ns:
                        first = (st.st_ino, st.st_mtime_ns)
                    elif first is not None and (st.st_ino, st.st_mtime_ns) != first:
                        with open(path) as f:
                            found = samples(f.read())
                        break
                except FileNotFoundError:
                    pass
                time.sleep(0.005)
            self.assertEqual(found.get(key("asyncshim_frees_total")), 3, found)
            # The collector reads *.prom: only this one (the temporary file is named otherwise).
            self.assertEqual(glob.glob(os.path.join(d, "*.prom")), [path])

            probe.stdin.write("\n")
            probe.stdin.close()
            self.assertEqual(probe.wait(timeout=30), 0)
            probe.stdout.close()
            self.assertFalse(os.path.exists(path), "the metrics file is removed at exit")
            self.assertEqual(sorted(os.listdir(d)), [f"stats-{pid}.json"], "nothing else left behind")
            with open(os.path.join(d, f"stats-{pid}.json")) as f:
                stats = json.load(f)
            device = next(x for x in stats["devices"] if x["device"] == 0)

            for metric, field in [("asyncshim_allocations_total", "allocations"),
                                  ("asyncshim_frees_total", "frees"),
                                  ("asyncshim_failed_allocations_total", "failed_allocations"),
                                  ("asyncshim_bytes_in_use", "bytes_in_use"),
                                  ("asyncshim_peak_bytes_in_use", "peak_bytes_in_use")]:
                self.assertEqual(found[key(metric)], device[field], metric)
            self.assertEqual(found[key("asyncshim_oom_recoveries_total")], device["out_of_memory"]["recoveries"])
            self.assertEqual(found[key("asyncshim_oom_recovered_total")], device["out_of_memory"]["recovered"])
            for reason, count in device["passed_through"].items():
                if reason != "total":
                    self.assertEqual(found[key("asyncshim_passed_through_allocations_total", reason=reason)], count,
                                     reason)
            for entry_point, count in device["allocations_by_entry_point"].items():
                self.assertEqual(found[key("asyncshim_allocations_by_entry_point_total", entry_point=entry_point)],
                                 count, entry_point)
            self.assertEqual(found[key("asyncshim_memory_limit_bytes")], LIMIT)
            # The probe's 1 PiB request failed after a recovery, which trimmed the pool to what is in use.
            self.assertEqual(device["out_of_memory"], {"recoveries": 1, "recovered": 0})
            self.assertEqual(found[key("asyncshim_pool_reserved_bytes")], device["bytes_in_use"])
            for call, ns in device["time_in_calls_ns"].items():
                seconds = found[key("asyncshim_call_seconds_total", call=call)]
                self.assertLessEqual(seconds, ns / 1e9 + 1e-9, call)  # the file is older than the statistics
            self.assertGreater(found[key("asyncshim_call_seconds_total", call="cudaMalloc")], 0)
            # Pinned host memory: the process's, no device label.
            host = stats["host"]
            process = {k: v for k, v in labels.items() if k != "device"}

            def process_key(name, **extra):
                return (name, frozenset(dict(process, **extra).items()))

            for metric, field in [("asyncshim_pinned_bytes_in_use", "bytes_in_use"),
                                  ("asyncshim_pinned_peak_bytes_in_use", "peak_bytes_in_use"),
                                  ("asyncshim_pinned_frees_total", "frees"),
                                  ("asyncshim_pinned_passed_through_total", "passed_through")]:
                self.assertEqual(found[process_key(metric)], host[field], metric)
            for entry_point, count in host["allocations_by_entry_point"].items():
                self.assertEqual(found[process_key("asyncshim_pinned_allocations_total", entry_point=entry_point)],
                                 count, entry_point)
            self.assertEqual((host["allocations"], host["frees"], host["bytes_in_use"]), (2, 1, 5000))

    def test_a_file_that_cannot_be_written_is_said_once_and_the_program_runs_on(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, LD_PRELOAD=SHIM, ASYNCSHIM_METRICS_INTERVAL="10ms",
                       ASYNCSHIM_METRICS_FILE=os.path.join(d, "no-such-folder", "m.prom"))
            probe = subprocess.Popen([PROBE, "wait"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
            self.assertEqual(probe.stdout.readline().split()[0], "pid")
            self.assertEqual(probe.stdout.readline().strip(), "ready")
            time.sleep(0.2)  # several intervals
            probe.stdin.write("\n")
            probe.stdin.close()
            self.assertEqual(probe.wait(timeout=30), 0)
            err = probe.stderr.read()
            probe.stdout.close()
            probe.stderr.close()
            self.assertEqual(err.count("cannot write the metrics file"), 1, err)
            self.assertIn("no-such-folder/m.prom", err)


if __name__ == "__main__":
    SHIM, PROBE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
