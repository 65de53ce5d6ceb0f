"""Median training-step time of an unmodified PyTorch loop, for comparing
allocators. One configuration per process: the allocator is chosen by the
environment the caller sets (scripts/benchmarks.sh runs each of these):

    caching          (nothing set: PyTorch's caching allocator)
    cudaMallocAsync  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
    uncached         PYTORCH_NO_CUDA_MEMORY_CACHING=1 (one cudaMalloc/cudaFree per tensor)
    uncached + shim  the same with LD_PRELOAD=libasyncshim.so [ASYNCSHIM_ORDERING=...]

    python3 torch_bench.py --model resnet18|transformer|mlp [--steps 40] [--warmup 10]

Prints one JSON object on one line (median, p10, p90 and mean step time in ms
over the timed steps; the memory the allocator held at its most,
reserved_high_water_bytes: PyTorch's max_memory_reserved() for its caching
allocator, else the reserved high-water mark of the CUDA pool that served the
tensors, which under the shim is the shim's pool; device_used_bytes, the
device's used memory by NVML at its most after a step, less what it was once
the CUDA context was made: every allocator's memory alike, what PyTorch takes
outside its cache included (None without NVML; meaningful only with nothing
else on the GPU, as in scripts/benchmarks.sh); and what the process
actually ran with: the allocator backend PyTorch reports, whether the shim is
loaded, its ordering), then one line for people. Each step is bracketed by torch.cuda.synchronize(), so a step
is everything it queued on the device. Prints "SKIP: ..." and exits 0 without
torch or a CUDA device.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time


def resnet18(torch):
    """ResNet-18 (He et al. 2015; torchvision's layout) in plain torch.nn:
    torchvision may be missing."""
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def build(torch, model_name, device):
    """The model, its optimizer and a function making one batch (inputs, targets)."""
    nn = torch.nn
    if model_name == "resnet18":
        batch = 64
        model = resnet18(torch).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

        def data():
            return (torch.randn(batch, 3, 224, 224, device=device), torch.randint(0, 1000, (batch,), device=device))
        return model, optimizer, data, f"ResNet-18, batch {batch}, 224x224, SGD"
    if model_name == "transformer":
        batch, seq, width, vocab = 32, 128, 512, 8192
        layer = nn.TransformerEncoderLayer(d_model=width, nhead=8, dim_feedforward=2048, dropout=0.1,
                                           batch_first=True)

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(vocab, width)
                self.encoder = nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
                self.head = nn.Linear(width, vocab)

            def forward(self, tokens):
                return self.head(self.encoder(self.embed(tokens))).flatten(0, 1)

        model = Encoder().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def data():
            tokens = torch.randint(0, vocab, (batch, seq), device=device)
            return tokens, torch.randint(0, vocab, (batch * seq,), device=device)
        return model, optimizer, data, f"6-layer transformer encoder, d_model {width}, batch {batch} x {seq} tokens, AdamW"
    if model_name == "mlp":
        batch, width, depth = 256, 1024, 8
        layers = []
        for i in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        def data():
            return torch.randn(batch, width, device=device), torch.randint(0, 10, (batch,), device=device)
        return model, optimizer, data, f"MLP, {depth} x {width}, batch {batch}, Adam"
    raise ValueError(model_name)


def torch_with_cuda():
    """torch, or None after printing why there is nothing to measure (no torch, no CUDA device)."""
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return None
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        return None
    return torch


def prepare(torch, model_name):
    """The model in training mode on the GPU (seeded), its optimizer, its batches, its description and loss."""
    torch.manual_seed(0)
    model, optimizer, data, description = build(torch, model_name, torch.device("cuda"))
    model.train()
    return model, optimizer, data, description, torch.nn.functional.cross_entropy


def shim_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return "libasyncshim" in maps.read()
    except OSError:
        return False


def pool_reserved_high_water(pointer: int):
    """The reserved high-water mark of the CUDA memory pool that holds `pointer`
    (under the shim: its pool, the reuse cache included), or None when the
    memory is not from a pool."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    pointer_attribute_mempool_handle = 17  # CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
    mempool_attr_reserved_mem_high = 6  # CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
    pool = ctypes.c_void_p()
    if cuda.cuPointerGetAttribute(ctypes.byref(pool), pointer_attribute_mempool_handle,
                                  ctypes.c_uint64(pointer)) != 0 or not pool.value:
        return None
    value = ctypes.c_uint64()
    if cuda.cuMemPoolGetAttribute(pool, mempool_attr_reserved_mem_high, ctypes.byref(value)) != 0:
        return None
    return value.value


class DeviceMemory:
    """The device's used memory as the driver's NVML library reports it, for
    the GPU torch computes on; used() is None without NVML."""

    def __init__(self, torch):
        import ctypes

        class Info(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

        self.ctypes, self.info, self.device = ctypes, Info, None
        try:
            self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return
        if self.nvml.nvmlInit_v2() != 0:
            return
        device = ctypes.c_void_p()
        index = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        if hasattr(p, "pci_bus_id"):  # NVML's numbering may differ from CUDA's: by bus id
            bus_id = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0".encode()
            found = self.nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id, ctypes.byref(device)) == 0
        else:
            found = "CUDA_VISIBLE_DEVICES" not in os.environ and \
                self.nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(device)) == 0
        self.device = device if found else None

    def used(self):
        if self.device is None:
            return None
        info = self.info()
        if self.nvml.nvmlDeviceGetMemoryInfo(self.device, self.ctypes.byref(info)) != 0:
            return None
        return info.used


def configuration(backend: str, shim: bool, ordering: str) -> str:
    """What the process ran with, from what it observes (not from a label)."""
    if backend == "cudaMallocAsync":
        name = "cudaMallocAsync"
    elif os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"):
        name = "uncached"
    else:
        name = "caching"
    reuse_cache = os.environ.get("ASYNCSHIM_REUSE_CACHE", "").strip()
    # A size of zero ("0", "0B", "0MiB", "0%") turns the reuse cache off.
    no_reuse = reuse_cache[:1].isdigit() and float(re.match(r"[0-9]*\.?[0-9]*", reuse_cache).group()) == 0
    extras = "+no-reuse" if no_reuse else ""
    return f"{name}+shim:{ordering}{extras}" if shim else name


def percentile(sorted_values, q):
    return sorted_values[int(q * (len(sorted_values) - 1) + 0.5)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("resnet18", "transformer", "mlp"), required=True)
    parser.add_argument("--steps", type=int, default=40, help="timed steps (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--purpose", choices=("time", "memory"), default="time",
                        help="what the run is for, recorded in its result (benchmarks.sh runs the memory figures "
                             "with the shim's default settings)")
    args = parser.parse_args()
    torch = torch_with_cuda()
    if torch is None:
        return 0
    torch.zeros(1, device="cuda")  # the context (and under the shim its pool) first: not the model's memory
    torch.cuda.synchronize()
    device_memory = DeviceMemory(torch)
    used_at_start = device_memory.used()
    used_most = used_at_start
    model, optimizer, data, description, loss_fn = prepare(torch, args.model)
    times = []
    for step in range(args.warmup + args.steps):
        inputs, targets = data()  # outside the timed region: the data loader's part
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(1000 * (time.perf_counter() - start))
        used = device_memory.used()  # outside the timed region
        if used is not None and used_most is not None:
            used_most = max(used_most, used)
    final_loss = loss.item()
    # The memory the allocator held at its most: PyTorch's cache, or the pool
    # that served the tensors (the shim's, for an uncached run under it).
    caching = torch.cuda.get_allocator_backend() == "native" and \
        os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") in ("", "0")
    reserved_high_water = (torch.cuda.max_memory_reserved() if caching
                           else pool_reserved_high_water(loss.data_ptr()))

    backend = torch.cuda.get_allocator_backend()
    shim = shim_loaded()
    ordering = (os.environ.get("ASYNCSHIM_ORDERING") or "device").lower()
    ordered = sorted(times)
    result = {
        "bench": "torch", "model": args.model, "description": description,
        "config": configuration(backend, shim, ordering),
        "steps": args.steps, "warmup": args.warmup,
        "median_step_ms": statistics.median(times), "p10_step_ms": percentile(ordered, 0.1),
        "p90_step_ms": percentile(ordered, 0.9), "mean_step_ms": statistics.fmean(times),
        "final_loss": final_loss,
        "reserved_high_water_bytes": reserved_high_water, "purpose": args.purpose,
        "device_used_bytes": used_most - used_at_start if used_at_start is not None else None,
        "ASYNCSHIM_INITIAL_POOL_SIZE": os.environ.get("ASYNCSHIM_INITIAL_POOL_SIZE"),
        "ASYNCSHIM_REUSE_CACHE": os.environ.get("ASYNCSHIM_REUSE_CACHE"),
        "allocator_backend": backend, "shim": shim, "ordering": ordering if shim else None,
        "PYTORCH_NO_CUDA_MEMORY_CACHING": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
    }
    print(json.dumps(result))
    print(f"torch_bench: {description}, {result['config']}: median {result['median_step_ms']:.2f} ms per step "
          f"(p10 {result['p10_step_ms']:.2f}, p90 {result['p90_step_ms']:.2f}; {args.steps} steps after "
          f"{args.warmup} warm-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
