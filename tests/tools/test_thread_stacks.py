"""scripts/thread-stacks.py on a process with libthread_stacks.so preloaded.
The process is python3 asleep in two threads, one of which blocks SIGUSR2
(as the shim's own threads block every signal). The other thread must answer
with a backtrace that starts in the library's signal handler; the blocking
one must be stopped with ptrace and its stack scanned, or, where ptrace is
refused (a container without CAP_SYS_PTRACE), be named as having no stack,
the tool then exiting 1. A process without the library: every thread scanned
or named so, never a backtrace.
  test_thread_stacks.py LIBTHREAD_STACKS SCRIPT"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

library, script = sys.argv[1], sys.argv[2]
SLEEPER = (
    "import signal, threading, time\n"
    "def blocking():\n"
    "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})\n"
    "    time.sleep(30)\n"
    "threading.Thread(target=blocking, daemon=True).start()\n"
    "time.sleep(30)\n")


def stacks_of(env, stacks):
    sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)
    try:
        time.sleep(1.0)  # both threads asleep
        shown = subprocess.run([sys.executable, script, str(sleeper.pid), stacks], capture_output=True, text=True,
                               timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    return sleeper.pid, shown


problems = []
with tempfile.TemporaryDirectory() as tmp:
    stacks = os.path.join(tmp, "stacks.txt")
    pid, shown = stacks_of(dict(os.environ, LD_PRELOAD=library, THREAD_STACKS_FILE=stacks), stacks)
    out = shown.stdout
    headers = [line for line in out.splitlines() if line.startswith("== thread ")]
    if len(headers) != 2:
        problems.append(f"{len(headers)} thread headers, expected 2")
    if not any(line.startswith(f"== thread {pid} ") and line.endswith("its backtrace") for line in headers):
        problems.append(f"no backtrace of the main thread {pid}")
    if out.count("libthread_stacks.so(") != 1:
        problems.append("not exactly one frame of the signal handler")
    if shutil.which("addr2line") and "on_signal" not in out:
        problems.append("the signal handler's frame is not named")
    scanned = "stopped, its stack scanned" in out
    refused = "ptrace could not stop it" in out
    if scanned:
        if shown.returncode != 0 or "returns to " not in out or "  at " not in out:
            problems.append(f"a scanned stack without its lines, or exit {shown.returncode}")
    elif refused:
        print("test_thread_stacks: ptrace is refused here: the scanned stack is not checked")
        if shown.returncode != 1:
            problems.append(f"a thread without a stack, but exit {shown.returncode}")
    else:
        problems.append("the thread that blocks SIGUSR2 was neither scanned nor named as having no stack")

    plain = os.path.join(tmp, "plain.txt")
    _, without = stacks_of(dict(os.environ), plain)
    if "its backtrace" in without.stdout or without.stdout.count("== thread ") != 2:
        problems.append("without the library: " + without.stdout.strip()[:300])
    if os.path.exists(plain):
        problems.append("without the library, the stacks file was written")
if problems:
    print(out)
    print("test_thread_stacks: FAILED: " + "; ".join(problems))
    sys.exit(1)
print("test_thread_stacks: ok")
