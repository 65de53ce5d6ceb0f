// Finding the CUDA runtime of the host program.
//
// libasyncshim.so has no NEEDED entry for libcudart or libcuda: it uses the
// runtime the program itself loaded, so the current device and every other bit
// of runtime state are the program's own, whatever CUDA 12.x/13.x it ships.
// The runtime is looked up once, on the first interposed call, in this order:
//   1. the next definition after this library in the global scope (dlsym
//      RTLD_NEXT): programs linked against libcudart, and libraries loaded
//      with RTLD_GLOBAL (PyTorch does this);
//   2. what the caller of that first call resolves: its own dependency tree,
//      which covers a library dlopen()ed with RTLD_LOCAL;
//   3. any loaded object whose name contains "libcudart".
// All functions are then taken from that one library, never mixed.
#pragma once

#include <cuda_runtime_api.h>

namespace asyncshim::shim {

struct runtime_functions {
  decltype(&::cudaMalloc) malloc = nullptr;
  decltype(&::cudaFree) free = nullptr;
  decltype(&::cudaGetDevice) get_device = nullptr;
  decltype(&::cudaSetDevice) set_device = nullptr;
  decltype(&::cudaDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cudaDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cudaMemGetInfo) mem_get_info = nullptr;
  decltype(&::cudaMemPoolCreate) mem_pool_create = nullptr;
  decltype(&::cudaMemPoolDestroy) mem_pool_destroy = nullptr;
  decltype(&::cudaMemPoolSetAttribute) mem_pool_set_attribute = nullptr;
  decltype(&::cudaMemPoolGetAttribute) mem_pool_get_attribute = nullptr;
  decltype(&::cudaMallocFromPoolAsync) malloc_from_pool_async = nullptr;
  decltype(&::cudaFreeAsync) free_async = nullptr;
  decltype(&::cudaGetLastError) get_last_error = nullptr;
  decltype(&::cudaDeviceSynchronize) device_synchronize = nullptr;
  decltype(&::cudaGetErrorName) get_error_name = nullptr;
  decltype(&::cudaGetErrorString) get_error_string = nullptr;

  // False when no CUDA runtime could be found (every pointer is then null).
  [[nodiscard]] bool found() const noexcept { return malloc != nullptr && free != nullptr; }
};

// The program's runtime, located on the first call that finds one (a failed
// search is tried again on the next call). `caller` is the return address of
// the interposed call, used by lookup step 2 above.
[[nodiscard]] runtime_functions const& runtime(void const* caller = nullptr) noexcept;

// The error an interposed call returns when no runtime can be found at all.
inline constexpr cudaError_t runtime_missing_error = cudaErrorInitializationError;

}  // namespace asyncshim::shim
