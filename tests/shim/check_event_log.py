"""The allocation event log (ASYNCSHIM_EVENT_LOG) checked against what
stats_probe did, under the CUDA test double: RMM's CSV format (a golden file
with the thread, the time and the pointers normalised), per-thread buffering
across threads, fork, a crash by SIGABRT, and a path that cannot be written.

    python3 check_event_log.py SHIM STATS_PROBE GOLDEN_CSV
"""
import csv
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True

SHIM = PROBE = GOLDEN = None
TIME = re.compile(r"^\d\d:\d\d:\d\d\.\d{6}$")
PROBE_TIMEOUT_S = 120  # each run takes well under a second: more is a hang


def run_probe(what, directory, expect_status=0, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
    full.update(LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="64MiB")
    full.setdefault("ASYNCSHIM_EVENT_LOG", os.path.join(directory, "events-%p.csv"))
    full.update(env)
    try:
        out = subprocess.run([PROBE, what], env=full, capture_output=True, text=True, check=False, cwd=directory,
                             timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"stats_probe {what} did not end within {PROBE_TIMEOUT_S} s") from None
    if out.returncode != expect_status:
        raise AssertionError(f"stats_probe {what} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    pids = {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines() if line.split()[0] != "same"}
    return pids, out.stderr


def read_log(path):
    with open(path, newline="") as fh:
        text = fh.read()
    assert text.endswith("\n"), "the log ends in the middle of a line"
    return list(csv.reader(text.splitlines()))


def logged(what, **env):
    """The pids stats_probe printed and the rows of its log, header first."""
    with tempfile.TemporaryDirectory() as d:
        pids, _ = run_probe(what, d, **env)
        return pids, read_log(os.path.join(d, "events-%d.csv" % pids["pid"]))


def golden_rows():
    with open(GOLDEN, newline="") as fh:
        return list(csv.reader(fh.read().splitlines()))


def normalised(rows, pid):
    """The rows with the thread (checked to be `pid`), the time (checked to
    be HH:MM:SS.ffffff) and each pointer (by first appearance) replaced."""
    names = {}
    out = [rows[0]]
    for thread, time, action, pointer, size, stream in rows[1:]:
        assert int(thread) == pid, (thread, pid)
        assert TIME.match(time), time
        if pointer != "0x0":
            assert pointer.startswith("0x"), pointer
            pointer = names.setdefault(pointer, "P%d" % (len(names) + 1))
        out.append(["T", "TIME", action, pointer, size, stream])
    return out


class EventLog(unittest.TestCase):
    def test_a_known_program_gives_the_golden_log(self):
        pids, rows = logged("basic")
        self.assertEqual(normalised(rows, pids["pid"]), golden_rows())
        # Pointers and streams in hexadecimal, as RMM writes them.
        for row in rows[1:]:
            int(row[3], 16), int(row[5], 16)

    def test_every_threads_records_are_complete_and_in_order(self):
        pids, (_, *rows) = logged("threads")
        by_thread = {}
        for thread, _, action, pointer, size, _ in rows:
            by_thread.setdefault(thread, []).append((action, pointer, int(size)))
        self.assertEqual(len(by_thread), 8)
        sizes = set()
        for events in by_thread.values():
            self.assertEqual(len(events), 4000)
            size = events[0][2]
            sizes.add(size)
            for i in range(0, 4000, 2):  # allocate, then free of the same block
                self.assertEqual(events[i][0], "allocate")
                self.assertEqual(events[i + 1][0], "free")
                self.assertEqual(events[i][1], events[i + 1][1])
                self.assertEqual((events[i][2], events[i + 1][2]), (size, size))
        self.assertEqual(sizes, {256 * (t + 1) for t in range(8)})

    def test_lines_are_in_the_order_of_the_events_across_threads(self):
        # One thread allocates, another frees at once: RMM's replay reads the
        # lines in file order, so no free may come before its allocation.
        pids, (_, *rows) = logged("handoff")
        self.assertEqual(len(rows), 4002)  # and the freeing thread's own first pair
        self.assertEqual(len({r[0] for r in rows}), 2)
        live = set()
        for _, _, action, pointer, _, _ in rows:
            if action == "allocate":
                self.assertNotIn(pointer, live)
                live.add(pointer)
            else:
                self.assertIn(pointer, live, "a free before its allocation")
                live.remove(pointer)
        self.assertEqual(live, set())

    def test_the_per_thread_stream_is_logged_as_rmm_numbers_it(self):
        pids, (_, *rows) = logged("basic", ASYNCSHIM_STREAM="per-thread")
        self.assertEqual({r[5] for r in rows}, {"2"})

    def test_with_the_host_pool_a_memory_column_says_which_memory(self):
        pids, rows = logged("pinned", ASYNCSHIM_HOST_POOL="1")
        self.assertEqual(rows[0], ["Thread", "Time", "Action", "Pointer", "Size", "Stream", "Memory"])
        golden = golden_rows()
        device = [r[:6] for r in rows[1:] if r[6] == "device"]
        self.assertEqual(normalised([golden[0]] + device, pids["pid"]), golden)  # the device lines as without it
        pinned = [(r[2], r[4], r[5]) for r in rows[1:] if r[6] == "pinned"]
        self.assertEqual(pinned, [("allocate", "3000", "0"), ("allocate", "5000", "0"), ("free", "3000", "0")])
        self.assertEqual({r[6] for r in rows[1:]}, {"device", "pinned"})

    def test_pinned_frees_during_captures_are_logged_as_they_end(self):
        pids, (_, *rows) = logged("pinned-captures", ASYNCSHIM_HOST_POOL="1")
        self.assertEqual([(r[2], r[4], r[6]) for r in rows],
                         [("allocate", "3000", "pinned"), ("allocate", "5000", "pinned"),
                          ("free", "3000", "pinned"),  # deferred: no one's from the free on
                          ("free", "5000", "pinned"), ("allocate", "5000", "pinned")])  # refused: the program's again

    def test_a_crash_writes_the_memory_column_too(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("abort", d, expect_status=-signal.SIGABRT, ASYNCSHIM_HOST_POOL="1")
            rows = read_log(os.path.join(d, "events-%d.csv" % pids["pid"]))
        self.assertEqual(rows[0][-1], "Memory")
        self.assertGreater(len(rows), 1)
        self.assertEqual({len(r) for r in rows}, {7})
        self.assertEqual({r[6] for r in rows[1:]}, {"device"})

    def test_without_the_host_pool_pinned_memory_is_not_logged(self):
        pids, rows = logged("pinned")
        self.assertEqual(normalised(rows, pids["pid"]), golden_rows())

    def test_a_forked_child_adds_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            pids, _ = run_probe("fork", d)
            files = sorted(os.listdir(d))
            rows = read_log(os.path.join(d, "events-%d.csv" % pids["pid"]))
        self.assertEqual(files, ["events-%d.csv" % pids["pid"]])
        self.assertEqual(normalised(rows, pids["pid"]), golden_rows())  # the parent's, once each

    def test_frees_in_a_global_objects_destructor_are_logged(self):
        pids, (_, *rows) = logged("global-free")
        self.assertEqual([(r[2], int(r[4])) for r in rows], [("allocate", 1234), ("allocate", 777), ("free", 1234)])

    def test_a_reset_logs_the_frees_it_makes(self):
        pids, (_, *rows) = logged("reset")
        events = [(r[2], r[3], int(r[4])) for r in rows]
        self.assertEqual([(a, s) for a, _, s in events[:2]], [("allocate", 1000), ("allocate", 2000)])
        self.assertEqual(sorted((a, p, s) for a, p, s in events[2:4]),
                         sorted(("free", p, s) for _, p, s in events[:2]))  # freed by the reset
        self.assertEqual([(a, s) for a, _, s in events[4:]], [("allocate", 3000)])

    def test_a_crash_keeps_what_was_buffered(self):
        pids, rows = logged("abort", expect_status=-signal.SIGABRT)
        self.assertEqual([(r[2], int(r[4])) for r in rows[1:]], [("allocate", 1000), ("allocate", 2000),
                                                                  ("allocate", 3000)])

    def test_a_running_program_s_events_are_written_within_a_pass(self):
        # A few events (fewer than a thread counts together), then the program
        # waits: the writer's next pass (every 100 ms) writes them, so that a
        # SIGKILL later loses none of them.
        with tempfile.TemporaryDirectory() as d:
            full = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
            full.update(LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="64MiB",
                        ASYNCSHIM_EVENT_LOG=os.path.join(d, "events.csv"))
            probe = subprocess.Popen([PROBE, "wait"], env=full, cwd=d, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
            try:
                lines = [probe.stdout.readline() for _ in range(2)]
                self.assertIn("ready\n", lines)
                with open(GOLDEN, newline="") as fh:
                    expected = len(fh.read().splitlines())
                rows = []
                for _ in range(100):  # up to 2 s: a pass is due every 100 ms
                    time.sleep(0.02)
                    with open(os.path.join(d, "events.csv"), newline="") as fh:
                        rows = fh.read().splitlines()
                    if len(rows) >= expected:
                        break
            finally:
                probe.kill()
                probe.wait()
        self.assertEqual(len(rows), expected, "the events of a waiting program are not written while it waits")

    def test_an_unwritable_path_is_said_and_the_program_runs(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "missing", "events.csv")
            _, err = run_probe("basic", d, ASYNCSHIM_EVENT_LOG=path)
        self.assertIn("ASYNCSHIM_EVENT_LOG: no event log is written to '%s': " % path, err)

    def test_no_log_by_default(self):
        with tempfile.TemporaryDirectory() as d:
            full = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
            full.update(LD_PRELOAD=SHIM)
            subprocess.run([PROBE, "basic"], env=full, capture_output=True, check=True, cwd=d)
            self.assertEqual(os.listdir(d), [])


if __name__ == "__main__":
    SHIM, PROBE, GOLDEN = sys.argv[1], sys.argv[2], sys.argv[3]
    unittest.main(argv=sys.argv[:1], verbosity=2)
