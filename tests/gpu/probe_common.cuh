// What several GPU probes share (peer_access_probe, pool_export_probe,
// shim_gpu_probe, sharing_probe, event_wait_race): the data pattern and the
// kernel that writes it, the device's clock, the pool behind a pointer, and
// the name printed for a memory access flag.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>

// Word i of a buffer filled with `seed`.
__host__ __device__ inline unsigned pattern(std::size_t i, unsigned seed)
{
  return static_cast<unsigned>(i) * 2654435761u ^ seed;
}

// Writes pattern(i, seed) to every word of data[0, n). (A kernel cannot be
// inline: include this header in one translation unit per program; each probe
// is a single .cu file.)
__global__ void fill_kernel(unsigned* data, std::size_t n, unsigned seed)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = pattern(i, seed);
  }
}

// The device's global clock, in nanoseconds (the same on every SM).
__device__ inline unsigned long long device_clock_ns()
{
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The pool a device pointer was allocated from, or null for memory not from a
// pool (cudaMalloc memory natively). The driver library is opened at run time,
// so the program also starts where none is installed.
inline cudaMemPool_t pool_of(void* ptr)
{
  using get_attribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static auto const fn = [] {
    void* const driver = dlopen("libcuda.so.1", RTLD_LAZY);
    return driver != nullptr ? reinterpret_cast<get_attribute>(dlsym(driver, "cuPointerGetAttribute")) : nullptr;
  }();
  if (fn == nullptr) { return nullptr; }
  CUmemoryPool pool = nullptr;
  CUresult const r = fn(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(ptr));
  return r == CUDA_SUCCESS ? reinterpret_cast<cudaMemPool_t>(pool) : nullptr;
}

// The name the probes print for a memory access flag.
inline char const* access_name(cudaMemAccessFlags f)
{
  switch (f) {
    case cudaMemAccessFlagsProtNone: return "none";
    case cudaMemAccessFlagsProtRead: return "read";
    case cudaMemAccessFlagsProtReadWrite: return "read-write";
  }
  return "unknown";
}
