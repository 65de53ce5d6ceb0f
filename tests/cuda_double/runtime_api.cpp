// runtime_api.cpp: the CUDA runtime API functions of the runtime TEST DOUBLE,
// libcudart_double.so (see cuda_double.h), with the CUDA 13.0 signatures of
// cuda_runtime_api.h. Argument checking, error reporting and the runtime's own
// per-thread state (current device, last error) live here; the state they work
// on is the driver double's model (model.h), reached through its internal API,
// never through an exported CUDA driver function. What the driver API offers
// too is done once in operations.h; here it is only called and its Outcome
// mapped to a cudaError_t.
#include <mutex>
#include <new>

#include <cuda_runtime_api.h>

#include "cuda_double.h"
#include "model.h"
#include "operations.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the CUDA double exports the legacy-default-stream names (cudaMemcpy, not cudaMemcpy_ptds)"
#endif

using cuda_double::AllocationKind;
using cuda_double::config;
using cuda_double::Context;
using cuda_double::Model;
using cuda_double::model;
using cuda_double::Outcome;
namespace operations = cuda_double::operations;

namespace {

using Lock = std::lock_guard<std::mutex>;

// The runtime's per-thread state.
thread_local int t_runtime_device = 0;  // cudaSetDevice's, used while no context is current
thread_local cudaError_t t_last_error = cudaSuccess;

constexpr bool kGated = true;    // fails first when there is no driver / no device
constexpr bool kUngated = false;

// As the real runtime does on its first call: initializes the driver (cuInit)
// once the configuration says there is one with devices.
cudaError_t available() {
  cudaError_t const e = cuda_double::availability();
  if (e == cudaSuccess) cuda_double::initialize();
  return e;
}

// The device the calling thread works on: that of the current context, after
// making the runtime device's primary context current when none is (as the
// real runtime does before any work).
int context_device() {
  Context* c = cuda_double::current_context();
  if (c == nullptr) {
    c = model().primary_context(t_runtime_device);
    cuda_double::set_current_context(c);
  }
  return c->device;
}

// Records a failing result as the calling thread's last error and counts it.
cudaError_t record(cudaError_t result) {
  if (result != cudaSuccess) {
    t_last_error = result;
    cuda_double::count_failure();
  }
  return result;
}

// Runs body (a callable returning cudaError_t), turning exceptions into CUDA
// errors, and records the result. gated: fail first when no driver / no device.
template <class Body>
cudaError_t run_api(bool gated, Body&& body) noexcept {
  cudaError_t result;
  try {
    result = gated ? available() : cudaSuccess;
    if (result == cudaSuccess) result = body();
  } catch (std::bad_alloc const&) {
    result = cudaErrorMemoryAllocation;
  } catch (...) {
    result = cudaErrorUnknown;
  }
  return record(result);
}

// The runtime's names for the model's answers.
cudaError_t to_cuda_error(Outcome outcome) {
  switch (outcome) {
    case Outcome::ok: return cudaSuccess;
    case Outcome::invalid_value: return cudaErrorInvalidValue;
    case Outcome::out_of_memory: return cudaErrorMemoryAllocation;
    case Outcome::invalid_device: return cudaErrorInvalidDevice;
    case Outcome::not_supported: return cudaErrorNotSupported;
    case Outcome::invalid_handle: return cudaErrorInvalidResourceHandle;
    // The runtime's name for CUDA_ERROR_INVALID_CONTEXT. Not expected here:
    // every call makes a context current (context_device) before the model
    // looks for one.
    case Outcome::invalid_context: return cudaErrorDeviceUninitialized;
  }
  return cudaErrorUnknown;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- versions

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDriverGetVersion(int* driverVersion) {
  return run_api(kUngated, [&] {
    if (driverVersion == nullptr) return cudaErrorInvalidValue;
    *driverVersion = config().no_driver ? 0 : cuda_double::kDriverVersion;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* runtimeVersion) {
  return run_api(kUngated, [&] {
    if (runtimeVersion == nullptr) return cudaErrorInvalidValue;
    *runtimeVersion = cuda_double::kRuntimeVersion;
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- errors

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t const e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return t_last_error; }

// ---------------------------------------------------------------- devices

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  return run_api(kUngated, [&] {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = 0;
    if (cudaError_t e = available()) return e;
    *count = config().devices;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  return run_api(kGated, [&] {
    if (device == nullptr) return cudaErrorInvalidValue;
    Context const* c = cuda_double::current_context();
    *device = c != nullptr ? c->device : t_runtime_device;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return run_api(kGated, [&] {
    Model& m = model();
    if (!m.valid_device(device)) return cudaErrorInvalidDevice;
    t_runtime_device = device;
    cuda_double::set_current_context(m.primary_context(device));
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  return run_api(kGated, [&] {
    return to_cuda_error(operations::device_attribute(device, attr, value));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total) {
  return run_api(kGated, [&] {
    int const device = context_device();
    if (free == nullptr || total == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    *free = m.free_bytes(device);
    *total = config().memory;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  return run_api(kGated, [&] {
    int const device = context_device();
    Model& m = model();
    Lock lock(m.mu);
    m.trim_pools(device);
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- cudaMalloc / cudaFree

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  return run_api(kGated, [&] {
    int const device = context_device();
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    *devPtr = nullptr;
    if (size == 0) return cudaSuccess;
    Model& m = model();
    Lock lock(m.mu);
    Outcome const o = m.allocate_native(device, size, AllocationKind::runtime, devPtr);
    if (o == Outcome::ok) m.counters.native_mallocs.fetch_add(1, std::memory_order_relaxed);
    return to_cuda_error(o);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  return run_api(kGated, [&] {
    context_device();  // cudaFree(nullptr) is the customary way to initialize the runtime
    if (devPtr == nullptr) return cudaSuccess;
    Model& m = model();
    Lock lock(m.mu);
    if (m.find_allocation(devPtr) == nullptr) return cudaErrorInvalidValue;
    m.release(devPtr);
    m.counters.native_frees.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- memcpy / memset

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return run_api(kGated, [&] {
    context_device();
    switch (kind) {
      case cudaMemcpyHostToHost:
      case cudaMemcpyHostToDevice:
      case cudaMemcpyDeviceToHost:
      case cudaMemcpyDeviceToDevice:
      case cudaMemcpyDefault: break;
      default: return cudaErrorInvalidMemcpyDirection;
    }
    return to_cuda_error(operations::copy(dst, src, count, operations::CopyDirection::unchecked));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  return run_api(kGated, [&] {
    context_device();
    // memset's conversion: only the low byte of value is written.
    return to_cuda_error(operations::fill(devPtr, static_cast<unsigned char>(value), count));
  });
}

// ---------------------------------------------------------------- streams

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return run_api(kGated, [&] {
    int const device = context_device();
    return to_cuda_error(operations::create_stream(device, flags, pStream));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream) {
  // Not through cudaStreamCreateWithFlags: a failure must be recorded once.
  return run_api(kGated, [&] {
    int const device = context_device();
    return to_cuda_error(operations::create_stream(device, cudaStreamDefault, pStream));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::destroy_stream(stream));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  return run_api(kGated, [&] {
    context_device();  // the special streams stand for its device
    return to_cuda_error(operations::synchronize_stream(stream));
  });
}

// ---------------------------------------------------------------- pools

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  return run_api(kGated, [&] {
    context_device();
    if (Outcome o = operations::pools_supported(); o != Outcome::ok) return to_cuda_error(o);
    if (memPool == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    if (!m.valid_device(device)) return cudaErrorInvalidDevice;
    Lock lock(m.mu);
    *memPool = reinterpret_cast<cudaMemPool_t>(m.device(device).default_pool);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  return run_api(kGated, [&] {
    context_device();
    if (poolProps == nullptr) return to_cuda_error(operations::create_pool(nullptr, memPool));
    auto const properties = operations::pool_properties(*poolProps, cudaMemAllocationTypePinned, cudaMemLocationTypeDevice);
    return to_cuda_error(operations::create_pool(&properties, memPool));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::destroy_pool(memPool));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::set_pool_attribute(memPool, attr, value));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::get_pool_attribute(memPool, attr, value));
  });
}

// ---------------------------------------------------------------- stream-ordered allocation

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::allocate_from_pool_async(memPool, size, stream, ptr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::allocate_async(size, hStream, devPtr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return run_api(kGated, [&] {
    context_device();
    return to_cuda_error(operations::free_async(devPtr, hStream));
  });
}

}  // extern "C"
