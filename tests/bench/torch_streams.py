"""Which CUDA streams a PyTorch training step puts work on: the kernels, copies
and sets of a few profiled steps of torch_bench.py's models, counted per
stream (torch.profiler's trace). For docs/design.md#followed-submissions: cuDNN makes
32 non-blocking streams at a program's first convolution, and frees can go in
the legacy stream's order only while those streams get no work.

    python3 torch_streams.py --model resnet18|transformer|mlp [--steps 3] [--warmup 3]

Run it natively or under the shim, with the caching allocator or uncached
(PYTORCH_NO_CUDA_MEMORY_CACHING=1): what it counts is the program's, not the
allocator's. Prints one line per stream ("torch_streams: stream N: K kernels,
C copies, S sets, per step"), then one JSON line. Prints "SKIP: ..." and exits
0 without torch, a CUDA device or the profiler's CUDA activity.
"""
import argparse
import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench  # noqa: E402  (the same models)

# What the trace names each kind of work on a stream.
KINDS = {"kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "sets"}


def count_by_stream(trace_path):
    """{stream id: {kind: count}} of the GPU work in a Chrome trace."""
    with open(trace_path) as f:
        trace = json.load(f)
    counts = collections.defaultdict(collections.Counter)
    for event in trace.get("traceEvents", []):
        kind = KINDS.get(event.get("cat", ""))
        stream = (event.get("args") or {}).get("stream")
        if kind is not None and stream is not None:
            counts[int(stream)][kind] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet18", "transformer", "mlp"), required=True)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be at least 1 and --warmup at least 0")
    torch = torch_bench.torch_with_cuda()
    if torch is None:
        return 0
    from torch.profiler import ProfilerActivity, profile

    model, optimizer, data, description, loss_fn = torch_bench.prepare(torch, args.model)

    def step():
        inputs, targets = data()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        trace_path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(trace_path)
        counts = count_by_stream(trace_path)
    if not counts:
        print("SKIP: the profiler recorded no CUDA work (no CUDA activity in this build of torch?)")
        return 0
    for stream in sorted(counts, key=lambda s: -sum(counts[s].values())):
        c = counts[stream]
        print(f"torch_streams: stream {stream}: " +
              ", ".join(f"{c[kind] / args.steps:g} {kind}" for kind in KINDS.values()) + " per step")
    print(json.dumps({"bench": "torch_streams", "model": args.model, "description": description,
                      "steps": args.steps, "torch": torch.__version__,
                      "uncached": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"),
                      "streams": {str(s): dict(c) for s, c in counts.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
