// The exported CUDA runtime API: thin C forwarders, nothing else. Each is
// noexcept all the way down (allocator.cpp catches everything), so no C++
// exception can reach the caller. exports.map lists exactly these names.
#include "allocator.hpp"

#define ASYNCSHIM_EXPORT extern "C" __attribute__((visibility("default")))

ASYNCSHIM_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size)
{
  return asyncshim::shim::allocate(devPtr, size, __builtin_return_address(0));
}

ASYNCSHIM_EXPORT cudaError_t cudaFree(void* devPtr)
{
  return asyncshim::shim::deallocate(devPtr, __builtin_return_address(0));
}
