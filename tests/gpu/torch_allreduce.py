"""Two-process PyTorch job (torchrun, NCCL): every step each rank makes fresh
tensors (with PYTORCH_NO_CUDA_MEMORY_CACHING=1 each is a cudaMalloc/cudaFree),
all-reduces one and checks the sum. Prints one result line per rank; rank 0
also prints the median step time.

    torchrun --nproc_per_node=2 tests/gpu/torch_allreduce.py [--steps N]

Run it with and without LD_PRELOAD=libasyncshim.so to compare
(scripts/gpu-check.sh does, on a machine with two GPUs).
"""
import argparse
import os
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--elements", type=int, default=1 << 20)
    args = parser.parse_args()
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("SKIP: no torch")
        return 0
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print(f"SKIP: needs two CUDA devices (found {torch.cuda.device_count() if torch.cuda.is_available() else 0})")
        return 0
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    wrong = 0
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        # Fresh tensors every step, as a training step makes activations.
        x = torch.full((args.elements,), float(rank + 1 + step), device="cuda")
        scratch = [torch.empty(args.elements // 8 * (i + 1), device="cuda") for i in range(8)]
        y = x * 2.0 + scratch[0][:1].zero_().sum()
        dist.all_reduce(y)
        expected = 2.0 * sum(r + 1 + step for r in range(world))
        if not torch.all(y == expected).item():
            wrong += 1
        del x, y, scratch
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    steady = times[5:] if len(times) > 10 else times
    print(f"rank {rank}: {args.steps} steps, wrong sums: {wrong}, median step {statistics.median(steady) * 1e3:.3f} ms",
          flush=True)
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
