// The CUDA runtime functions that asyncshim::resource calls, defined here as
// hidden forwarders.
//
// The resource library calls cudaMemPoolCreate & co. by name. Linked into
// libasyncshim.so, those names bind to these definitions, which are hidden
// (-fvisibility=hidden and abi/exports.map.in): the program never sees them, and the
// shim needs no NEEDED entry for libcudart or libcuda. Inside a driver-level
// call (cuda/calling_thread.hpp) they go to the driver's equivalents — a program
// with a statically linked runtime has no other runtime to go to; otherwise
// to the program's own runtime (cuda/runtime.hpp). The driver's types and
// enumerations used here are the runtime's, value for value (cudaMemPool_t is
// CUmemoryPool, cudaStream_t is CUstream, cudaMemPoolProps is laid out as
// CUmemPoolProps, and CUresult codes equal the cudaError_t codes returned).
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/runtime.hpp"

namespace {

using asyncshim::shim::api_level;
using asyncshim::shim::current_api_level;
using asyncshim::shim::driver;
using asyncshim::shim::driver_functions;
using asyncshim::shim::runtime;
using asyncshim::shim::runtime_functions;
using asyncshim::shim::runtime_missing_error;

bool on_driver() noexcept { return current_api_level() == api_level::driver; }

template <class Fn, class... Args>
cudaError_t to_runtime(Fn runtime_functions::*function, Args... args)
{
  Fn const fn = runtime().*function;
  return fn != nullptr ? fn(args...) : runtime_missing_error;
}

template <class Fn, class... Args>
cudaError_t to_driver(Fn driver_functions::*function, Args... args)
{
  Fn const fn = driver().*function;
  return fn != nullptr ? static_cast<cudaError_t>(fn(args...)) : cudaErrorInitializationError;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDevice(int* device)
{
  return on_driver() ? to_driver(&driver_functions::ctx_get_device, device)
                     : to_runtime(&runtime_functions::get_device, device);
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device)
{
  return on_driver() ? to_driver(&driver_functions::device_get_attribute, value,
                                 static_cast<CUdevice_attribute>(attribute), device)
                     : to_runtime(&runtime_functions::device_get_attribute, value, attribute, device);
}

cudaError_t cudaDriverGetVersion(int* version)
{
  return on_driver() ? to_driver(&driver_functions::driver_get_version, version)
                     : to_runtime(&runtime_functions::driver_get_version, version);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total)
{
  return on_driver() ? to_driver(&driver_functions::mem_get_info, free, total)
                     : to_runtime(&runtime_functions::mem_get_info, free, total);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, cudaMemPoolProps const* props)
{
  return on_driver() ? to_driver(&driver_functions::mem_pool_create, reinterpret_cast<CUmemoryPool*>(pool),
                                 reinterpret_cast<CUmemPoolProps const*>(props))
                     : to_runtime(&runtime_functions::mem_pool_create, pool, props);
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool)
{
  return on_driver() ? to_driver(&driver_functions::mem_pool_destroy, reinterpret_cast<CUmemoryPool>(pool))
                     : to_runtime(&runtime_functions::mem_pool_destroy, pool);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value)
{
  return on_driver() ? to_driver(&driver_functions::mem_pool_set_attribute, reinterpret_cast<CUmemoryPool>(pool),
                                 static_cast<CUmemPool_attribute>(attribute), value)
                     : to_runtime(&runtime_functions::mem_pool_set_attribute, pool, attribute, value);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value)
{
  return on_driver() ? to_driver(&driver_functions::mem_pool_get_attribute, reinterpret_cast<CUmemoryPool>(pool),
                                 static_cast<CUmemPool_attribute>(attribute), value)
                     : to_runtime(&runtime_functions::mem_pool_get_attribute, pool, attribute, value);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
  return on_driver() ? to_driver(&driver_functions::mem_alloc_from_pool_async, reinterpret_cast<CUdeviceptr*>(ptr),
                                 size, reinterpret_cast<CUmemoryPool>(pool), reinterpret_cast<CUstream>(stream))
                     : to_runtime(&runtime_functions::malloc_from_pool_async, ptr, size, pool, stream);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream)
{
  return on_driver() ? to_driver(&driver_functions::mem_free_async, reinterpret_cast<CUdeviceptr>(ptr),
                                 reinterpret_cast<CUstream>(stream))
                     : to_runtime(&runtime_functions::free_async, ptr, stream);
}

// The driver keeps no last error: nothing to clear there.
cudaError_t cudaGetLastError() { return on_driver() ? cudaSuccess : to_runtime(&runtime_functions::get_last_error); }

char const* cudaGetErrorName(cudaError_t error)
{
  char const* name = nullptr;
  if (on_driver()) {
    auto const fn = driver().get_error_name;
    if (fn != nullptr && fn(static_cast<CUresult>(error), &name) == CUDA_SUCCESS && name != nullptr) { return name; }
    return "CUDA_ERROR_UNKNOWN";
  }
  auto const fn = runtime().get_error_name;
  return fn != nullptr ? fn(error) : "cudaErrorUnknown";
}

char const* cudaGetErrorString(cudaError_t error)
{
  char const* text = nullptr;
  if (on_driver()) {
    auto const fn = driver().get_error_string;
    if (fn != nullptr && fn(static_cast<CUresult>(error), &text) == CUDA_SUCCESS && text != nullptr) { return text; }
    return "unknown error";
  }
  auto const fn = runtime().get_error_string;
  return fn != nullptr ? fn(error) : "no CUDA runtime found in this process";
}

}  // extern "C"
