// A plugin linked against the CUDA runtime (here: its test double) and loaded
// by plugin_host with dlopen(RTLD_LOCAL): the runtime is then invisible to the
// global scope, as for many Python extension modules.
#include "cuda_double.hpp"

#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) int plugin_allocate_and_report()
{
  void* p = nullptr;
  if (cudaMalloc(&p, 4096) != cudaSuccess) { return -1; }
  int const kind = cuda_double_pointer_kind(p);
  if (cudaFree(p) != cudaSuccess) { return -2; }
  return kind;  // 1: native cudaMalloc, 2: pool
}
