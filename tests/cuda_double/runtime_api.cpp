// runtime_api.cpp: the CUDA runtime API functions of the TEST DOUBLE (see
// cuda_double.h), with the CUDA 13.0 signatures of cuda_runtime_api.h. Argument
// checking and error reporting live here; the state lives in model.cpp.
#include <cstring>
#include <mutex>

#include <cuda_runtime_api.h>

#include "cuda_double.h"
#include "model.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the CUDA double exports the legacy-default-stream names (cudaMemcpy, not cudaMemcpy_ptds)"
#endif

using cuda_double::Allocation;
using cuda_double::config;
using cuda_double::current_device;
using cuda_double::last_error;
using cuda_double::Model;
using cuda_double::model;
using cuda_double::Pool;
using cuda_double::run_api;

namespace {

using Lock = std::lock_guard<std::mutex>;

constexpr bool kGated = true;    // fails first when there is no driver / no device
constexpr bool kUngated = false;

cudaError_t pools_supported() {
  return config().no_pools ? cudaErrorNotSupported : cudaSuccess;
}

// A range [p, p + count) that starts inside a live allocation must end inside it.
bool range_ok(Model const& m, void const* p, std::size_t count) {
  auto [base, a] = m.allocation_containing(p);
  if (a == nullptr) return true;
  std::size_t const offset = static_cast<char const*>(p) - static_cast<char const*>(base);
  return count <= a->size - offset;
}

std::uint64_t* as_u64(void* value) { return static_cast<std::uint64_t*>(value); }
int* as_int(void* value) { return static_cast<int*>(value); }

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
  cudaError_t const e = last_error();
  last_error() = cudaSuccess;
  return e;
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return last_error(); }

// ---------------------------------------------------------------- devices

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  return run_api(kUngated, [&] {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = 0;
    if (cudaError_t e = cuda_double::availability()) return e;
    *count = config().devices;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  return run_api(kGated, [&] {
    if (device == nullptr) return cudaErrorInvalidValue;
    *device = current_device();
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaSetDevice(int device) {
  return run_api(kGated, [&] {
    if (!model().valid_device(device)) return cudaErrorInvalidDevice;
    current_device() = device;
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
    if (free == nullptr || total == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    *free = m.free_bytes(current_device());
    *total = config().memory;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  return run_api(kGated, [&] {
    Model& m = model();
    Lock lock(m.mu);
    m.trim_pools(current_device());
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- cudaMalloc / cudaFree

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  return run_api(kGated, [&] {
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    *devPtr = nullptr;
    if (size == 0) return cudaSuccess;
    Model& m = model();
    Lock lock(m.mu);
    cudaError_t const e = m.allocate_native(current_device(), size, devPtr);
    if (e == cudaSuccess) m.counters.native_mallocs.fetch_add(1, std::memory_order_relaxed);
    return e;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  return run_api(kGated, [&] {
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
    if (!range_ok(m, dst, count) || !range_ok(m, src, count)) return cudaErrorInvalidValue;
    std::memmove(dst, src, count);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  return run_api(kGated, [&] {
    if (count == 0) return cudaSuccess;
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    if (m.allocation_containing(devPtr).second == nullptr || !range_ok(m, devPtr, count))
      return cudaErrorInvalidValue;
    std::memset(devPtr, value, count);
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- streams

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return run_api(kGated, [&] {
    if (pStream == nullptr) return cudaErrorInvalidValue;
    if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    *pStream = m.create_stream(current_device(), flags);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream) {
  // Not through cudaStreamCreateWithFlags: a failure must be recorded once.
  return run_api(kGated, [&] {
    if (pStream == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    *pStream = m.create_stream(current_device(), cudaStreamDefault);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  return run_api(kGated, [&] {
    Model& m = model();
    Lock lock(m.mu);
    return m.destroy_stream(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  return run_api(kGated, [&] {
    Model& m = model();
    Lock lock(m.mu);
    if (!m.valid_stream(stream)) return cudaErrorInvalidResourceHandle;
    m.trim_pools(m.stream_device(stream));
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- pools

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  return run_api(kGated, [&] {
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
    if (cudaError_t e = pools_supported()) return e;
    if (value == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    Pool* pool = m.find_pool(memPool);
    if (pool == nullptr) return cudaErrorInvalidValue;
    switch (attr) {
      case cudaMemPoolReuseFollowEventDependencies: pool->reuse_follow_event_dependencies = *as_int(value) != 0; break;
      case cudaMemPoolReuseAllowOpportunistic: pool->reuse_allow_opportunistic = *as_int(value) != 0; break;
      case cudaMemPoolReuseAllowInternalDependencies: pool->reuse_allow_internal_dependencies = *as_int(value) != 0; break;
      case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *as_u64(value); break;
      case cudaMemPoolAttrReservedMemHigh:  // only a reset (to the current value) is allowed
        if (*as_u64(value) != 0) return cudaErrorInvalidValue;
        pool->reserved_high = pool->reserved;
        break;
      case cudaMemPoolAttrUsedMemHigh:
        if (*as_u64(value) != 0) return cudaErrorInvalidValue;
        pool->used_high = pool->used;
        break;
      default: return cudaErrorInvalidValue;  // the *Current ones are read-only
    }
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  return run_api(kGated, [&] {
    if (cudaError_t e = pools_supported()) return e;
    if (value == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    Pool const* pool = m.find_pool(memPool);
    if (pool == nullptr) return cudaErrorInvalidValue;
    switch (attr) {
      case cudaMemPoolReuseFollowEventDependencies: *as_int(value) = pool->reuse_follow_event_dependencies; break;
      case cudaMemPoolReuseAllowOpportunistic: *as_int(value) = pool->reuse_allow_opportunistic; break;
      case cudaMemPoolReuseAllowInternalDependencies: *as_int(value) = pool->reuse_allow_internal_dependencies; break;
      case cudaMemPoolAttrReleaseThreshold: *as_u64(value) = pool->release_threshold; break;
      case cudaMemPoolAttrReservedMemCurrent: *as_u64(value) = pool->reserved; break;
      case cudaMemPoolAttrReservedMemHigh: *as_u64(value) = pool->reserved_high; break;
      case cudaMemPoolAttrUsedMemCurrent: *as_u64(value) = pool->used; break;
      case cudaMemPoolAttrUsedMemHigh: *as_u64(value) = pool->used_high; break;
      default: return cudaErrorInvalidValue;
    }
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- stream-ordered allocation

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return run_api(kGated, [&] {
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
    if (cudaError_t e = pools_supported()) return e;
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    Model& m = model();
    Lock lock(m.mu);
    if (!m.valid_stream(hStream)) return cudaErrorInvalidResourceHandle;
    *devPtr = nullptr;
    if (size != 0) {
      Pool& pool = *m.device(m.stream_device(hStream)).default_pool;
      if (cudaError_t e = m.allocate_from_pool(pool, size, devPtr)) return e;
      m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
    }
    m.last_alloc_stream = hStream;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return run_api(kGated, [&] {
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
