// A second interposer of cuGetProcAddress_v2 that finds the driver's lazily,
// with dlsym, on its first call (as interposers do). Preloaded after
// libasyncshim.so it must neither be mistaken for the driver nor make the
// shim look things up recursively (which once deadlocked).
#include <cuda.h>
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
  char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus)
{
  using lookup = CUresult (*)(char const*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  static auto const real =
    reinterpret_cast<lookup>(dlsym(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), "cuGetProcAddress_v2"));
  return real != nullptr ? real(symbol, pfn, cudaVersion, flags, symbolStatus) : CUDA_ERROR_NOT_INITIALIZED;
}
