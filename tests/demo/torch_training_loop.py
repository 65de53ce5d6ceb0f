"""An ordinary PyTorch training loop, used unmodified by the A/B demo:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 asyncshim-ab -- python3 tests/demo/torch_training_loop.py [steps]

An 8-layer MLP (batch 256, width 1024) trained with Adam. With PyTorch's
caching allocator off, every tensor is one cudaMalloc and one cudaFree, which
is what the shim speeds up; the step count is large enough that the loop, not
Python's and CUDA's start-up, dominates a run. Prints the final loss.
"""
import sys

import torch


def main(steps: int) -> None:
    if not torch.cuda.is_available():
        sys.exit("torch_training_loop: no CUDA device")
    torch.manual_seed(0)
    layers = []
    for _ in range(7):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    print(f"final loss {loss.item():.4f} after {steps} steps")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
