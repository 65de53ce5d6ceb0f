"""CuPy under the shim: with CuPy's own pool off (every array one cudaMalloc),
a computation gives the same result with and without libasyncshim.so.

    python3 cupy_same_result.py --shim SHIM
Prints "SKIP: ..." when CuPy or a device is missing (which of them).
"""
import argparse
import os
import subprocess
import sys

CHILD = r"""
import cupy
cupy.cuda.set_allocator(None)  # CuPy's pool off: cudaMalloc/cudaFree per array
x = cupy.arange(1 << 20, dtype=cupy.float64)
total = 0.0
for i in range(200):
    y = cupy.sin(x * (i + 1)) @ cupy.cos(x)
    total += float(y)
print(f"{total:.6f}")
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", required=True)
    args = parser.parse_args()
    try:
        import cupy
    except ImportError:
        print("SKIP: CuPy is not installed")
        return 0
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no device")
    except Exception as e:  # CUDA errors without a GPU (tests/gpu/gpu_test.py fails this where one exists)
        print(f"SKIP: no CUDA device for CuPy ({type(e).__name__})")
        return 0
    results = []
    for preload in (None, os.path.abspath(args.shim)):
        env = dict(os.environ, ASYNCSHIM_INITIAL_POOL_SIZE="1GiB")
        env.pop("LD_PRELOAD", None)
        if preload:
            env["LD_PRELOAD"] = preload
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"FAIL: {'with' if preload else 'without'} the shim: exit {out.returncode}\n{out.stderr}")
            return 1
        results.append(out.stdout.strip())
    print(f"without the shim: {results[0]}, with: {results[1]}")
    return 0 if results[0] == results[1] else 1


if __name__ == "__main__":
    sys.exit(main())
