// A second preloaded library (besides libasyncshim.so) that wraps
// cudaGetDeviceCount and finds the next definition with dlsym(RTLD_NEXT), as
// interposers do. It must find the runtime's, exactly as without the shim: a
// dlsym wrapper that made RTLD_NEXT relative to itself would hand this
// library its own function back.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

extern "C" __attribute__((visibility("default"))) cudaError_t cudaGetDeviceCount(int* count)
{
  auto next = reinterpret_cast<decltype(&cudaGetDeviceCount)>(dlsym(RTLD_NEXT, "cudaGetDeviceCount"));
  if (next == nullptr || next == &cudaGetDeviceCount) {
    std::printf("next_preload: RTLD_NEXT found %s\n", next == nullptr ? "nothing" : "this library's own function");
    return cudaErrorUnknown;
  }
  std::printf("next_preload: RTLD_NEXT found the next cudaGetDeviceCount\n");
  return next(count);
}
