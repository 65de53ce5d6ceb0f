// A neighbour on the same "GPU": a program of the CUDA test double, run
// without the shim, sharing the devices' memory with the test through
// CUDA_DOUBLE_SHARED_MEMORY.
//   memory_neighbour allocate BYTES   cudaMalloc and cudaFree BYTES; prints "allocated" or "failed <error>"
//   memory_neighbour hold BYTES       allocates BYTES, prints "holding", and keeps them until its input closes
// Exit status 0 when the allocation succeeded, 1 when it failed, 2 on bad usage.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv)
{
  if (argc != 3 || (std::strcmp(argv[1], "allocate") != 0 && std::strcmp(argv[1], "hold") != 0)) {
    std::fprintf(stderr, "usage: memory_neighbour allocate|hold BYTES\n");
    return 2;
  }
  std::size_t const bytes = std::strtoull(argv[2], nullptr, 10);
  void* p = nullptr;
  cudaError_t const e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    std::printf("failed %s\n", cudaGetErrorName(e));
    return 1;
  }
  if (std::strcmp(argv[1], "hold") == 0) {
    std::printf("holding\n");
    std::fflush(stdout);
    while (std::getchar() != EOF) {}
  } else {
    std::printf("allocated\n");
  }
  return cudaFree(p) == cudaSuccess ? 0 : 1;
}
