"""An unmodified PyTorch training loop, with PyTorch's caching allocator off
(PYTORCH_NO_CUDA_MEMORY_CACHING=1, so one cudaMalloc/cudaFree per tensor), run
without and with libasyncshim.so preloaded. With deterministic algorithms the
losses must be identical; the median step times are printed for the notes.

    python3 torch_same_losses.py --shim build/libasyncshim.so [--steps 40]

Prints "SKIP: ..." and exits 0 when torch or a CUDA device is missing.
"""
import argparse
import json
import os
import subprocess
import sys


def train(steps: int) -> dict:
    import time

    import torch

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
    # Strided convolutions instead of pooling: adaptive pooling has no
    # deterministic backward on CUDA.
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 16, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator(device="cpu").manual_seed(1)
    losses, times = [], []
    for _ in range(steps):
        x = torch.randn(64, 3, 32, 32, generator=generator).to(device)
        y = torch.randint(0, 10, (64,), generator=generator).to(device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    warm = sorted(times[5:])
    return {"losses": losses, "median_step_ms": 1000 * warm[len(warm) // 2]}


def run_child(shim: str | None, steps: int) -> dict:
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", CUBLAS_WORKSPACE_CONFIG=":4096:8")
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = shim
        env.setdefault("ASYNCSHIM_INITIAL_POOL_SIZE", "2GiB")
    out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(steps)],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"FAIL: training {'with' if shim else 'without'} the shim exited {out.returncode}:\n"
                 f"{out.stdout}{out.stderr}")
    if out.stderr.strip():
        print(f"stderr {'with' if shim else 'without'} the shim:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(train(args.steps)))
        return 0
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        return 0
    native = run_child(None, args.steps)
    shim = run_child(os.path.abspath(args.shim), args.steps)
    same = native["losses"] == shim["losses"]
    print(f"losses: first {native['losses'][0]:.6f} last {native['losses'][-1]:.6f}; "
          f"identical with the shim: {same}")
    print(f"median step (PYTORCH_NO_CUDA_MEMORY_CACHING=1): without the shim {native['median_step_ms']:.2f} ms, "
          f"with {shim['median_step_ms']:.2f} ms")
    if not same:
        for i, (a, b) in enumerate(zip(native["losses"], shim["losses"])):
            if a != b:
                print(f"FAIL: step {i}: {a!r} != {b!r}")
                break
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
