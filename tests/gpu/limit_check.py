"""ASYNCSHIM_MEMORY_LIMIT on a real GPU (docs/memory-limit.md), with CuPy and
JAX as the programs, each process under the shim:

    python3 limit_check.py --shim SHIM pair|cupy-meminfo|jax

pair          two processes, each limited to 40% of the GPU: one holds 30% and
              keeps allocating and computing while the other, past its limit,
              gets cudaErrorMemoryAllocation; the refused one's warning names the
              holder (through the driver's NVML) and this process.
cupy-meminfo  under a 40% limit, cudaMemGetInfo reports the limit as the total
              and no more free than it leaves; 35% fits, 45% does not.
jax           JAX preallocates 75% of what memory info reports: under a 40%
              limit it holds about 30% of the GPU, not 75%, and computes.

Every check compares with what the device itself reports (NVML, natively), so
a shim that did not load fails them. Prints "SKIP: ..." when CuPy or JAX is
missing, "FAIL: ..." for a broken check.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

LIMIT = "40%"

HOLDER = r"""
import sys, cupy
cupy.cuda.set_allocator(None)  # every array one cudaMalloc
total = cupy.cuda.runtime.getDeviceProperties(0)["totalGlobalMem"]
held = cupy.empty(int(total * 0.30) // 8, dtype=cupy.float64)
print("holding", flush=True)
sys.stdin.readline()           # the neighbour has failed by now
more = cupy.ones(int(total * 0.05) // 8, dtype=cupy.float64)  # still inside 40%
print("sum", float(more.sum()) == more.size, flush=True)
"""

NEIGHBOUR = r"""
import cupy
cupy.cuda.set_allocator(None)
total = cupy.cuda.runtime.getDeviceProperties(0)["totalGlobalMem"]
first = cupy.empty(int(total * 0.30) // 8, dtype=cupy.float64)
try:
    second = cupy.empty(int(total * 0.20) // 8, dtype=cupy.float64)
    print("allocated past the limit")
except cupy.cuda.runtime.CUDARuntimeError as e:  # without CuPy's pool a refusal is the runtime's error
    print("out of memory" if e.status == 2 else f"error {e.status}")
"""

MEMINFO = r"""
import cupy
cupy.cuda.set_allocator(None)
free, total = cupy.cuda.runtime.memGetInfo()
device_total = cupy.cuda.runtime.getDeviceProperties(0)["totalGlobalMem"]
print("meminfo", free, total, device_total)
fits = cupy.empty(int(device_total * 0.35) // 8, dtype=cupy.float64)
print("35% fits")
del fits
try:
    cupy.empty(int(device_total * 0.45) // 8, dtype=cupy.float64)
    print("45% fits")
except cupy.cuda.runtime.CUDARuntimeError as e:
    print("45% refused" if e.status == 2 else f"45% error {e.status}")
"""

JAX = r"""
import os, jax, jax.numpy as jnp
x = jnp.arange(1 << 20, dtype=jnp.float32)
print("sum", float(jnp.sum(x * 2.0)) == float((1 << 20) * ((1 << 20) - 1)), flush=True)
print("pid", os.getpid(), flush=True)
input()                        # the parent reads NVML while JAX holds its preallocation
"""


class Nvml:
    """The device as the driver sees it, without the shim: total memory and
    the memory each process holds."""

    class ProcessInfo(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                    ("gpu_instance", ctypes.c_uint), ("compute_instance", ctypes.c_uint)]

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.device = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.device)) != 0:
            raise RuntimeError("nvmlDeviceGetHandleByIndex_v2(0) failed")

    def total(self):
        m = self.Memory()
        self.lib.nvmlDeviceGetMemoryInfo(self.device, ctypes.byref(m))
        return m.total

    def used(self):
        m = self.Memory()
        self.lib.nvmlDeviceGetMemoryInfo(self.device, ctypes.byref(m))
        return m.used

    def pids(self):
        count = ctypes.c_uint(256)
        infos = (self.ProcessInfo * 256)()
        if self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.device, ctypes.byref(count), infos) != 0:
            return set()
        return {infos[i].pid for i in range(count.value)}


def environment(shim, **extra):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("ASYNCSHIM_MEMORY")}
    env.update(LD_PRELOAD=os.path.abspath(shim), ASYNCSHIM_MEMORY_LIMIT=LIMIT, **extra)
    return env


def fail(text):
    print(f"FAIL: {text}")
    return 1


def pair(shim):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "neighbour.log")
        holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=environment(shim), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            if holder.stdout.readline().strip() != "holding":
                return fail("the holder could not take 30% under its 40% limit")
            nvml_sees_our_pids = holder.pid in Nvml().pids()
            out = subprocess.run([sys.executable, "-c", NEIGHBOUR], env=environment(shim, ASYNCSHIM_LOG_FILE=log),
                                 capture_output=True, text=True, timeout=300, check=False)
            print(f"neighbour: exit {out.returncode}, {out.stdout.strip()}")
            holder.stdin.write("go\n")
            holder.stdin.flush()
            rest, _ = holder.communicate(timeout=300)
        finally:
            if holder.poll() is None:
                holder.kill()
        print(f"holder: exit {holder.returncode}, {rest.strip()}")
        warning = open(log).read() if os.path.exists(log) else ""
    print(warning.strip())
    problems = []
    if out.returncode != 0 or out.stdout.strip() != "out of memory":
        problems.append("the neighbour was not refused at its limit")
    if holder.returncode != 0 or rest.strip() != "sum True":
        problems.append("the holder could not go on inside its limit")
    if "out of memory inside the limit of" not in warning:
        problems.append("no out-of-memory warning with the limit")
    listed = [line for line in warning.splitlines() if " pid " in line]
    if "the processes using device 0" not in warning or len(listed) < 2:
        problems.append("the warning does not list the processes using the device")
    elif nvml_sees_our_pids:
        # NVML's pids are this pid namespace's: the holder has its name, the neighbour is this process.
        if f"pid {holder.pid} (python3" not in warning or "(this process)" not in warning:
            problems.append("the warning does not name the holder and this process")
    else:
        print("NVML lists the host's pids (another pid namespace): names not checked")
    return fail("; ".join(problems)) if problems else 0


def cupy_meminfo(shim):
    out = subprocess.run([sys.executable, "-c", MEMINFO], env=environment(shim), capture_output=True, text=True,
                         timeout=300, check=False)
    print(out.stdout.strip())
    if out.returncode != 0:
        return fail(f"exit {out.returncode}\n{out.stderr}")
    words = dict((line.split()[0], line.split()[1:]) for line in out.stdout.splitlines())
    free, total, device_total = (int(v) for v in words["meminfo"])
    limit = device_total * 40 // 100
    problems = []
    if abs(total - limit) > (64 << 20):
        problems.append(f"memory info's total {total} is not the limit {limit}")
    if free > total:
        problems.append(f"memory info's free {free} exceeds its total {total}")
    if "35%" not in words or "45%" not in words or words["45%"] != ["refused"]:
        problems.append("45% of the device was not refused under a 40% limit")
    return fail("; ".join(problems)) if problems else 0


def jax_inside(shim):
    nvml = Nvml()
    total = nvml.total()
    before = nvml.used()
    env = environment(shim, XLA_PYTHON_CLIENT_PREALLOCATE="true")
    child = subprocess.Popen([sys.executable, "-c", JAX], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        lines = [child.stdout.readline().strip(), child.stdout.readline().strip()]
        time.sleep(1)
        held = nvml.used() - before  # the device's own count: nothing else runs beside this test
        child.stdin.write("\n")
        child.stdin.flush()
        _, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    print(f"jax: {lines}, holds {held} of {total} bytes ({held / total:.1%})")
    if child.returncode != 0 or lines[0] != "sum True":
        return fail(f"JAX did not compute under the limit (exit {child.returncode})\n{err[-3000:]}")
    # 75% of the 40% it was told, plus its context: well inside 40%, well above nothing.
    if not 0.20 * total <= held <= 0.40 * total:
        return fail(f"JAX holds {held / total:.1%} of the GPU under a 40% limit (expected about 30%)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shim", required=True)
    parser.add_argument("check", choices=("pair", "cupy-meminfo", "jax"))
    args = parser.parse_args()
    module = "jax" if args.check == "jax" else "cupy"
    try:
        __import__(module)
    except ImportError:
        print(f"SKIP: {'JAX' if module == 'jax' else 'CuPy'} is not installed")
        return 0
    return {"pair": pair, "cupy-meminfo": cupy_meminfo, "jax": jax_inside}[args.check](args.shim)


if __name__ == "__main__":
    sys.exit(main())
