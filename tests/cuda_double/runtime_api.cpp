// runtime_api.cpp: the CUDA runtime API functions of the runtime TEST DOUBLE,
// libcudart_double.so (see cuda_double.h), with the CUDA 13.0 signatures of
// cuda_runtime_api.h. Argument checking, error reporting and the runtime's own
// per-thread state (current device, last error) live here; the state they work
// on is the driver double's model (model.h), reached through its internal API,
// never through an exported CUDA driver function.
#include <cstring>
#include <mutex>
#include <new>

#include <cuda_runtime_api.h>

#include "cuda_double.h"
#include "model.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the CUDA double exports the legacy-default-stream names (cudaMemcpy, not cudaMemcpy_ptds)"
#endif

using cuda_double::Allocation;
using cuda_double::AllocationKind;
using cuda_double::config;
using cuda_double::Context;
using cuda_double::Model;
using cuda_double::model;
using cuda_double::Pool;

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

cudaError_t pools_supported() {
  return config().no_pools ? cudaErrorNotSupported : cudaSuccess;
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
    if (value == nullptr) return cudaErrorInvalidValue;
    if (!model().valid_device(device)) return cudaErrorInvalidDevice;
    switch (attr) {
      case cudaDevAttrMemoryPoolsSupported: *value = config().no_pools ? 0 : 1; break;
      case cudaDevAttrMemoryPoolSupportedHandleTypes:
        *value = config().no_pools ? 0 : static_cast<int>(config().pool_handle_types);
        break;
      case cudaDevAttrComputeCapabilityMajor: *value = cuda_double::kComputeCapabilityMajor; break;
      case cudaDevAttrComputeCapabilityMinor: *value = cuda_double::kComputeCapabilityMinor; break;
      default: *value = 0; break;
    }
    return cudaSuccess;
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
    cudaError_t const e = m.allocate_native(device, size, AllocationKind::runtime, devPtr);
    if (e == cudaSuccess) m.counters.native_mallocs.fetch_add(1, std::memory_order_relaxed);
    return e;
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
    if (count == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    if (!m.range_ok(dst, count) || !m.range_ok(src, count)) return cudaErrorInvalidValue;
    std::memmove(dst, src, count);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  return run_api(kGated, [&] {
    context_device();
    if (count == 0) return cudaSuccess;
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    if (m.allocation_containing(devPtr).second == nullptr || !m.range_ok(devPtr, count))
      return cudaErrorInvalidValue;
    std::memset(devPtr, value, count);
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- streams

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return run_api(kGated, [&] {
    int const device = context_device();
    if (pStream == nullptr) return cudaErrorInvalidValue;
    if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    *pStream = m.create_stream(device, flags);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream) {
  // Not through cudaStreamCreateWithFlags: a failure must be recorded once.
  return run_api(kGated, [&] {
    int const device = context_device();
    if (pStream == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    *pStream = m.create_stream(device, cudaStreamDefault);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  return run_api(kGated, [&] {
    context_device();
    Model& m = model();
    Lock lock(m.mu);
    return m.destroy_stream(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  return run_api(kGated, [&] {
    int const device = context_device();
    Model& m = model();
    Lock lock(m.mu);
    if (!m.valid_stream(stream)) return cudaErrorInvalidResourceHandle;
    m.trim_pools(m.stream_device(stream, device));
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- pools

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  return run_api(kGated, [&] {
    context_device();
    if (cudaError_t e = pools_supported()) return e;
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
    if (cudaError_t e = pools_supported()) return e;
    if (memPool == nullptr || poolProps == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    if (poolProps->allocType != cudaMemAllocationTypePinned) return cudaErrorInvalidValue;
    if (poolProps->location.type != cudaMemLocationTypeDevice || !m.valid_device(poolProps->location.id))
      return cudaErrorInvalidValue;
    auto const handle_types = static_cast<unsigned>(poolProps->handleTypes);
    if ((handle_types & ~config().pool_handle_types) != 0) return cudaErrorNotSupported;
    Lock lock(m.mu);
    Pool& pool = m.create_pool(poolProps->location.id, handle_types, poolProps->maxSize, /*is_default=*/false);
    *memPool = reinterpret_cast<cudaMemPool_t>(&pool);
    m.counters.pools_created.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  return run_api(kGated, [&] {
    context_device();
    if (cudaError_t e = pools_supported()) return e;
    Model& m = model();
    Lock lock(m.mu);
    Pool* pool = m.find_pool(memPool);
    if (pool == nullptr || pool->is_default) return cudaErrorInvalidValue;
    m.destroy_pool(*pool);
    m.counters.pools_destroyed.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  return run_api(kGated, [&] {
    context_device();
    if (cudaError_t e = pools_supported()) return e;
    if (value == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    Pool* pool = m.find_pool(memPool);
    if (pool == nullptr) return cudaErrorInvalidValue;
    return Model::set_pool_attribute(*pool, attr, value);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  return run_api(kGated, [&] {
    context_device();
    if (cudaError_t e = pools_supported()) return e;
    if (value == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    Pool const* pool = m.find_pool(memPool);
    if (pool == nullptr) return cudaErrorInvalidValue;
    return Model::get_pool_attribute(*pool, attr, value);
  });
}

// ---------------------------------------------------------------- stream-ordered allocation

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return run_api(kGated, [&] {
    context_device();
    if (cudaError_t e = pools_supported()) return e;
    if (ptr == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    Pool* pool = m.find_pool(memPool);
    if (pool == nullptr) return cudaErrorInvalidValue;
    if (!m.valid_stream(stream)) return cudaErrorInvalidResourceHandle;
    *ptr = nullptr;
    if (size != 0) {
      if (cudaError_t e = m.allocate_from_pool(*pool, size, ptr)) return e;
      m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
    }
    m.last_alloc_stream = stream;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return run_api(kGated, [&] {
    int const current = context_device();
    if (cudaError_t e = pools_supported()) return e;
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    if (!m.valid_stream(hStream)) return cudaErrorInvalidResourceHandle;
    *devPtr = nullptr;
    if (size != 0) {
      Pool& pool = *m.device(m.stream_device(hStream, current)).default_pool;
      if (cudaError_t e = m.allocate_from_pool(pool, size, devPtr)) return e;
      m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
    }
    m.last_alloc_stream = hStream;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return run_api(kGated, [&] {
    context_device();
    if (cudaError_t e = pools_supported()) return e;
    Model& m = model();
    Lock lock(m.mu);
    if (!m.valid_stream(hStream)) return cudaErrorInvalidResourceHandle;
    // Unlike cudaFree, a null pointer is an error (as cuMemFreeAsync treats it).
    Allocation const* a = m.find_allocation(devPtr);
    if (devPtr == nullptr || a == nullptr || a->pool == nullptr) return cudaErrorInvalidValue;
    m.release(devPtr);
    m.counters.pool_frees.fetch_add(1, std::memory_order_relaxed);
    m.last_free_stream = hStream;
    return cudaSuccess;
  });
}

}  // extern "C"
