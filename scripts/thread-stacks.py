#!/usr/bin/env python3
"""Where each thread of a process that seems stuck is, on a machine without gdb:
  scripts/thread-stacks.py PID STACKS_FILE

The process should have been started with tests/tools' libthread_stacks.so
preloaded and THREAD_STACKS_FILE=STACKS_FILE. Each of its threads gets
SIGUSR2 in turn and writes its call stack there. A thread that does not
answer (it blocks signals, as the shim's own threads do, or the library is
not loaded) is stopped for a moment with ptrace instead (x86-64, root or the
process's owner): its instruction pointer, and the return addresses found on
its stack (words that point just after a call instruction in a program or
library), innermost first; stale words of earlier calls can be among them.
Every frame of a program or library that addr2line can read is followed by
its function's name. Exit 0 when every thread's stack came, 1 when some did
not (the process gone, ptrace refused), 2 on bad usage."""
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

SCAN_BYTES = 64 * 1024  # of a stopped thread's stack, from its stack pointer
MOST_SCANNED = 40       # return addresses shown per stopped thread
TGKILL = {"x86_64": 234, "aarch64": 131}
PTRACE_GETREGS, PTRACE_ATTACH, PTRACE_DETACH = 12, 16, 17
WALL = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
LIBC.ptrace.restype = ctypes.c_long


class Registers(ctypes.Structure):  # struct user_regs_struct, x86-64
    _fields_ = [(name, ctypes.c_ulonglong) for name in (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
        "fs_base gs_base ds es fs gs").split()]


def mappings(pid):
    """(start, end, permissions, path, load base) of each mapping."""
    rows = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            path = fields[5].strip() if len(fields) > 5 else ""
            rows.append((start, end, fields[1], path, int(fields[2], 16)))
    bases = {}
    for start, _, _, path, offset in rows:
        if path.startswith("/") and offset == 0 and path not in bases:
            bases[path] = start
    return [(start, end, perms, path, bases.get(path, start)) for start, end, perms, path, _ in rows]


def code_at(maps, address):
    for start, end, perms, path, base in maps:
        if start <= address < end and "x" in perms:
            return path, address - base
    return None


names = {}


def named(path, offset):
    """path(+0xOFFSET) and, where addr2line tells, the function."""
    text = f"{path}(+{offset:#x})"
    if shutil.which("addr2line") and path.startswith("/"):
        key = (path, offset)
        if key not in names:
            shown = subprocess.run(["addr2line", "-f", "-C", "-e", path, f"{offset:#x}"], capture_output=True,
                                   text=True)
            first = shown.stdout.splitlines()[0] if shown.stdout else "??"
            names[key] = "" if first == "??" else first
        if names[key]:
            text += "  " + names[key]
    return text


def after_call(mem, address):
    """Whether the bytes before `address` end with a call instruction."""
    try:
        mem.seek(address - 7)
        before = mem.read(7)
    except OSError:
        return False
    if len(before) != 7:
        return False
    if before[2] == 0xE8:  # call rel32
        return True
    # call r/m64 (FF /2) of 2, 3, 4, 6 or 7 bytes
    for length in (2, 3, 4, 6, 7):
        if before[7 - length] == 0xFF and (before[8 - length] >> 3) & 7 == 2:
            return True
    return False


def scanned_stack(pid, tid, maps):
    """The stack of a thread stopped with ptrace, as lines; None when it cannot be stopped."""
    if LIBC.ptrace(PTRACE_ATTACH, tid, None, None) != 0:
        return None
    try:
        os.waitpid(tid, WALL)
        registers = Registers()
        if LIBC.ptrace(PTRACE_GETREGS, tid, None, ctypes.byref(registers)) != 0:
            return None
        lines = []
        at = code_at(maps, registers.rip)
        lines.append("at " + (named(*at) if at else f"{registers.rip:#x}"))
        stack_end = next((end for start, end, _, _, _ in maps if start <= registers.rsp < end), registers.rsp)
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(registers.rsp)
            words = mem.read(min(SCAN_BYTES, stack_end - registers.rsp))
            found = 0
            for i in range(0, len(words) - 7, 8):
                value = int.from_bytes(words[i:i + 8], "little")
                where = code_at(maps, value)
                if where and after_call(mem, value):
                    lines.append("returns to " + named(*where))
                    found += 1
                    if found == MOST_SCANNED:
                        break
        return lines
    finally:
        LIBC.ptrace(PTRACE_DETACH, tid, None, None)


def main():
    if len(sys.argv) != 3 or not sys.argv[1].isdigit():
        print("usage: scripts/thread-stacks.py PID STACKS_FILE", file=sys.stderr)
        return 2
    pid, stacks_file = int(sys.argv[1]), sys.argv[2]
    try:
        maps = mappings(pid)
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        print(f"thread-stacks: process {pid} is gone", file=sys.stderr)
        return 1
    preloaded = any("libthread_stacks" in path for _, _, _, path, _ in maps)
    tgkill = TGKILL.get(os.uname().machine)
    if preloaded and tgkill is not None:
        for tid in tids:
            LIBC.syscall(tgkill, pid, tid, int(signal.SIGUSR2))
            time.sleep(0.1)
    answered = {}  # thread: the lines of its stack
    current = None
    if preloaded and os.path.exists(stacks_file):
        with open(stacks_file, errors="replace") as written:
            for line in written:
                line = line.rstrip("\n")
                if line.startswith("== thread "):
                    current = answered.setdefault(int(line.split()[2]), [])
                elif current is not None:
                    current.append(line)
    missing = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            name = "?"
        if tid in answered:
            print(f"== thread {tid} ({name}): its backtrace")
            for line in answered[tid]:
                # path(+0xOFFSET)[address] from backtrace_symbols_fd: named where addr2line can
                if "(+0x" in line and line.endswith("]"):
                    path, rest = line.split("(+0x", 1)
                    line = named(path, int(rest.split(")", 1)[0], 16))
                print("  " + line)
            continue
        lines = scanned_stack(pid, tid, maps) if os.uname().machine == "x86_64" else None
        if lines is None:
            print(f"== thread {tid} ({name}): no stack (it did not answer, and ptrace could not stop it)")
            missing += 1
            continue
        print(f"== thread {tid} ({name}): stopped, its stack scanned")
        for line in lines:
            print("  " + line)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
