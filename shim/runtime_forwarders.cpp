// The CUDA runtime functions that asyncshim::resource calls, defined here as
// hidden forwarders to the program's own runtime (runtime_binding.hpp).
//
// The resource library calls cudaMemPoolCreate & co. by name. Linked into
// libasyncshim.so, those names bind to these definitions, which are hidden
// (-fvisibility=hidden and exports.map): the program never sees them, and the
// shim needs no NEEDED entry for libcudart.
#include "runtime_binding.hpp"

namespace {

using asyncshim::shim::runtime;
using asyncshim::shim::runtime_functions;
using asyncshim::shim::runtime_missing_error;

template <class Fn, class... Args>
cudaError_t forward(Fn runtime_functions::*function, Args... args)
{
  Fn const fn = runtime().*function;
  return fn != nullptr ? fn(args...) : runtime_missing_error;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDevice(int* device) { return forward(&runtime_functions::get_device, device); }

cudaError_t cudaSetDevice(int device) { return forward(&runtime_functions::set_device, device); }

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device)
{
  return forward(&runtime_functions::device_get_attribute, value, attribute, device);
}

cudaError_t cudaDriverGetVersion(int* version) { return forward(&runtime_functions::driver_get_version, version); }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total)
{
  return forward(&runtime_functions::mem_get_info, free, total);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, cudaMemPoolProps const* props)
{
  return forward(&runtime_functions::mem_pool_create, pool, props);
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { return forward(&runtime_functions::mem_pool_destroy, pool); }

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value)
{
  return forward(&runtime_functions::mem_pool_set_attribute, pool, attribute, value);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value)
{
  return forward(&runtime_functions::mem_pool_get_attribute, pool, attribute, value);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
  return forward(&runtime_functions::malloc_from_pool_async, ptr, size, pool, stream);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) { return forward(&runtime_functions::free_async, ptr, stream); }

cudaError_t cudaGetLastError() { return forward(&runtime_functions::get_last_error); }

char const* cudaGetErrorName(cudaError_t error)
{
  auto const fn = runtime().get_error_name;
  return fn != nullptr ? fn(error) : "cudaErrorUnknown";
}

char const* cudaGetErrorString(cudaError_t error)
{
  auto const fn = runtime().get_error_string;
  return fn != nullptr ? fn(error) : "no CUDA runtime found in this process";
}

}  // extern "C"
