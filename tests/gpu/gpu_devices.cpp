// How many CUDA devices this machine has, asked of the CUDA runtime without the
// shim (tests/gpu/gpu_test.py removes LD_PRELOAD first): the GPU tier's one
// decision to skip. Prints "gpu_devices: N" and, with none, why in brackets.
#include <cuda_runtime_api.h>

#include <cstdio>

int main()
{
  int count = 0;
  cudaError_t const e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::printf("gpu_devices: 0 (cudaGetDeviceCount: %s)\n", cudaGetErrorName(e));
  } else if (count == 0) {
    std::printf("gpu_devices: 0 (cudaGetDeviceCount found none)\n");
  } else {
    std::printf("gpu_devices: %d\n", count);
  }
  return 0;
}
