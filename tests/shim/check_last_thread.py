"""A program whose main thread ends with pthread_exit ends when its last
thread does, as without the shim: the shim's own threads (the idle release,
the event log's writer, the legacy IPC channel) end once only they are left,
and the exit handlers still run (the free an exit handler makes is in the
event log, which only the exit's flush can write then). A thread of the
program's that is still at work keeps them, and the process, alive.

    python3 check_last_thread.py SHIM STATS_PROBE
"""
import csv
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True

SHIM = PROBE = None
# The shim's threads look once a second: the process ends within a few.
ENDS_WITHIN_S = 10
# Past this, the run is a hang.
HANG_S = 60


def run_probe(directory, *args, shim=True, threads="asyncshim-idle", **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCSHIM_")}
    if shim:
        full.update(LD_PRELOAD=SHIM, ASYNCSHIM_INITIAL_POOL_SIZE="0")
    full.update(env)
    started = time.monotonic()
    try:
        out = subprocess.run([PROBE, "main-exits", *args], env=full, capture_output=True, text=True,
                             check=False, cwd=directory, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"stats_probe main-exits {' '.join(args)} did not end within {HANG_S} s "
                             "after its main thread did") from None
    took = time.monotonic() - started
    if out.returncode != 0:
        raise AssertionError(f"stats_probe main-exits exited {out.returncode}:\n{out.stdout}{out.stderr}")
    printed = dict((line.split(" ", 1) + [""])[:2] for line in out.stdout.splitlines())
    assert printed["threads"] == threads, (printed["threads"], threads)  # the threads that must end
    assert took < ENDS_WITHIN_S, f"it took {took:.1f} s to end"
    return int(printed["pid"])


def logged(directory, pid):
    with open(os.path.join(directory, "events-%d.csv" % pid), newline="") as fh:
        return [(row[2], int(row[4])) for row in list(csv.reader(fh.read().splitlines()))[1:]]


class LastThread(unittest.TestCase):
    def test_without_the_shim(self):
        with tempfile.TemporaryDirectory() as d:
            run_probe(d, shim=False, threads="")

    def test_the_idle_release_thread_ends(self):
        with tempfile.TemporaryDirectory() as d:
            run_probe(d)

    def test_a_long_idle_period_does_not_keep_it(self):
        with tempfile.TemporaryDirectory() as d:
            run_probe(d, ASYNCSHIM_IDLE_RELEASE="600s")

    def test_the_event_logs_writer_ends_and_the_exit_handlers_run(self):
        with tempfile.TemporaryDirectory() as d:
            pid = run_probe(d, threads="asyncshim-idle,asyncshim-log",
                            ASYNCSHIM_EVENT_LOG=os.path.join(d, "events-%p.csv"))
            self.assertEqual(logged(d, pid), [("allocate", 1000), ("free", 1000)])

    def test_the_ipc_channels_thread_ends(self):
        with tempfile.TemporaryDirectory() as d:
            pid = run_probe(d, "ipc", threads="asyncshim-ipc,asyncshim-log", ASYNCSHIM_IDLE_RELEASE="off",
                            ASYNCSHIM_EVENT_LOG=os.path.join(d, "events-%p.csv"))
            self.assertEqual(logged(d, pid), [("allocate", 1000), ("free", 1000)])

    def test_a_program_thread_at_work_keeps_them(self):
        # The program's thread checks, 2.5 s after the main thread's end (the
        # shim's threads have looked twice by then), that the shim's threads
        # are all still there (status 4 if not), and allocates.
        with tempfile.TemporaryDirectory() as d:
            pid = run_probe(d, "late", threads="asyncshim-idle,asyncshim-log", ASYNCSHIM_IDLE_RELEASE="100ms",
                            ASYNCSHIM_EVENT_LOG=os.path.join(d, "events-%p.csv"))
            self.assertEqual(logged(d, pid), [("allocate", 1000), ("allocate", 4242), ("free", 4242),
                                              ("free", 1000)])


if __name__ == "__main__":
    SHIM, PROBE = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
