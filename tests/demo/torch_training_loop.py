"""An ordinary PyTorch training loop, used unmodified by the A/B demo:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 asyncshim-ab -- python3 tests/demo/torch_training_loop.py

With PyTorch's caching allocator off, every tensor is one cudaMalloc and one
cudaFree, which is what the shim speeds up. Prints the final loss.
"""
import sys

import torch


def main(steps: int = 150) -> None:
    if not torch.cuda.is_available():
        sys.exit("torch_training_loop: no CUDA device")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 8 * 8, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 150)
