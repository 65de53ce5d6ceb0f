// exec_probe PROGRAM [ARGS...]: allocates and frees through the CUDA test
// double (under the shim, which opens its log file then), then exec()s
// PROGRAM: whatever descriptor the shim left without close-on-exec, PROGRAM has.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv)
{
  if (argc < 2) {
    std::fprintf(stderr, "usage: exec_probe PROGRAM [ARGS...]\n");
    return 2;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) { return 1; }
  execv(argv[1], argv + 1);
  std::perror("exec_probe: execv");
  return 1;
}
