// driver_api.cpp: the CUDA driver API functions of the driver TEST DOUBLE,
// libcuda.so.1 (see cuda_double.h), with the CUDA 13.0 signatures of cuda.h.
// Argument checking and the CUresult codes live here; the state lives in the
// model (model.cpp), shared with the runtime double. No function here calls
// another exported function: shared code is internal.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "cuda_driver_double.h"
#include "model.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the driver double defines the plain and the _ptsz names itself"
#endif

using cuda_double::AllocationKind;
using cuda_double::config;
using cuda_double::Context;
using cuda_double::Model;
using cuda_double::model;
using cuda_double::Pool;

// The driver's and the runtime's enumerations that the model shares.
static_assert(int{CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES} == int{cudaMemPoolReuseFollowEventDependencies});
static_assert(int{CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC} == int{cudaMemPoolReuseAllowOpportunistic});
static_assert(int{CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES} == int{cudaMemPoolReuseAllowInternalDependencies});
static_assert(int{CU_MEMPOOL_ATTR_RELEASE_THRESHOLD} == int{cudaMemPoolAttrReleaseThreshold});
static_assert(int{CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT} == int{cudaMemPoolAttrReservedMemCurrent});
static_assert(int{CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH} == int{cudaMemPoolAttrReservedMemHigh});
static_assert(int{CU_MEMPOOL_ATTR_USED_MEM_CURRENT} == int{cudaMemPoolAttrUsedMemCurrent});
static_assert(int{CU_MEMPOOL_ATTR_USED_MEM_HIGH} == int{cudaMemPoolAttrUsedMemHigh});
static_assert(unsigned{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR} == unsigned{cudaMemHandleTypePosixFileDescriptor});
static_assert(unsigned{CU_MEM_HANDLE_TYPE_FABRIC} == unsigned{cudaMemHandleTypeFabric});

namespace {

using Lock = std::lock_guard<std::mutex>;

// What a call needs before it does anything (after the stub check).
enum class Gate {
  none,         // nothing: works before cuInit
  initialized,  // cuInit (or the runtime double) has initialized the driver
  context,      // ... and the calling thread has a current context
};

CUresult check(Gate gate) {
  if (gate == Gate::none) return CUDA_SUCCESS;
  if (config().no_driver) return CUDA_ERROR_STUB_LIBRARY;
  if (!cuda_double::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (gate == Gate::context && cuda_double::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

// Runs body (a callable returning CUresult) after the gate, turning exceptions
// into CUDA errors and counting failures.
template <class Body>
CUresult run_driver(Gate gate, Body&& body) noexcept {
  CUresult result;
  try {
    result = check(gate);
    if (result == CUDA_SUCCESS) result = body();
  } catch (std::bad_alloc const&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    result = CUDA_ERROR_UNKNOWN;
  }
  if (result != CUDA_SUCCESS) cuda_double::count_failure();
  return result;
}

// The model speaks cudaError_t; these are the driver's names for its answers.
CUresult to_cu(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorNotSupported: return CUDA_ERROR_NOT_SUPPORTED;
    case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorNoDevice: return CUDA_ERROR_NO_DEVICE;
    default: return CUDA_ERROR_UNKNOWN;
  }
}

void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUdeviceptr as_deviceptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

CUresult pools_supported() { return config().no_pools ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS; }

// The device a stream stands for; a special stream (0, legacy, per-thread)
// needs a current context. m.mu must be held.
CUresult stream_device(Model const& m, CUstream stream, int& device) {
  if (!m.valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (Model::is_special_stream(stream)) {
    Context const* c = cuda_double::current_context();
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    device = c->device;
  } else {
    device = m.stream_device(stream, 0);
  }
  return CUDA_SUCCESS;
}

// The _ptsz entry points see the null stream as the per-thread default stream.
CUstream per_thread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

// ---- shared bodies of the plain and _ptsz entry points

CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    int device = 0;
    if (CUresult e = stream_device(m, stream, device)) return e;
    *dptr = 0;
    if (bytesize != 0) {
      void* p = nullptr;
      if (cudaError_t e = m.allocate_from_pool(*m.device(device).default_pool, bytesize, &p)) return to_cu(e);
      *dptr = as_deviceptr(p);
      m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
    }
    m.last_alloc_stream = stream;
    return CUDA_SUCCESS;
  });
}

CUresult mem_alloc_from_pool_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool handle, CUstream stream) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    Pool* pool = m.find_pool(handle);
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int device = 0;
    if (CUresult e = stream_device(m, stream, device)) return e;
    *dptr = 0;
    if (bytesize != 0) {
      void* p = nullptr;
      if (cudaError_t e = m.allocate_from_pool(*pool, bytesize, &p)) return to_cu(e);
      *dptr = as_deviceptr(p);
      m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
    }
    m.last_alloc_stream = stream;
    return CUDA_SUCCESS;
  });
}

CUresult mem_free_async(CUdeviceptr dptr, CUstream stream) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    Model& m = model();
    Lock lock(m.mu);
    int device = 0;
    if (CUresult e = stream_device(m, stream, device)) return e;
    void* p = as_pointer(dptr);
    auto const* a = m.find_allocation(p);
    if (p == nullptr || a == nullptr || a->pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    m.release(p);
    m.counters.pool_frees.fetch_add(1, std::memory_order_relaxed);
    m.last_free_stream = stream;
    return CUDA_SUCCESS;
  });
}

CUresult stream_synchronize(CUstream stream) {
  return run_driver(Gate::initialized, [&] {
    Model& m = model();
    Lock lock(m.mu);
    int device = 0;
    if (CUresult e = stream_device(m, stream, device)) return e;
    m.trim_pools(device);
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- initialization, versions

CUDA_DOUBLE_API CUresult CUDAAPI cuInit(unsigned int Flags) {
  return run_driver(Gate::none, [&] {
    if (config().no_driver) return CUDA_ERROR_STUB_LIBRARY;
    if (cuda_double::availability() != cudaSuccess) return CUDA_ERROR_NO_DEVICE;
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    cuda_double::initialize();
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  return run_driver(Gate::none, [&] {
    if (config().no_driver) return CUDA_ERROR_STUB_LIBRARY;
    if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = cuda_double::kDriverVersion;
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- devices

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  return run_driver(Gate::initialized, [&] {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!model().valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetCount(int* count) {
  return run_driver(Gate::initialized, [&] {
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *count = model().device_count();
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  return run_driver(Gate::initialized, [&] {
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!model().valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(name, static_cast<std::size_t>(len), "cuda_double device %d (test double, not a GPU)", dev);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  return run_driver(Gate::initialized, [&] {
    if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!model().valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
      case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *pi = config().no_pools ? 0 : 1; break;
      case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        *pi = config().no_pools ? 0 : static_cast<int>(config().pool_handle_types);
        break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = cuda_double::kComputeCapabilityMajor; break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = cuda_double::kComputeCapabilityMinor; break;
      default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- contexts

CUDA_DOUBLE_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return run_driver(Gate::initialized, [&] {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    if (!m.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    Lock lock(m.mu);
    Context* c = m.primary_context(dev);
    ++c->retains;
    *pctx = reinterpret_cast<CUcontext>(c);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return run_driver(Gate::initialized, [&] {
    Model& m = model();
    if (!m.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    Lock lock(m.mu);
    Context* c = m.primary_context(dev);
    if (c->retains == 0) return CUDA_ERROR_INVALID_CONTEXT;  // as documented in cuda.h
    --c->retains;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  return run_driver(Gate::initialized, [&] {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *pctx = reinterpret_cast<CUcontext>(cuda_double::current_context());
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  return run_driver(Gate::initialized, [&] {
    Context* c = nullptr;
    if (ctx != nullptr) {
      c = model().find_context(ctx);
      if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    }
    cuda_double::set_current_context(c);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  return run_driver(Gate::context, [&] {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *device = cuda_double::current_context()->device;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  return run_driver(Gate::initialized, [&] {
    Context* c = ctx == nullptr ? nullptr : model().find_context(ctx);
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    return cuda_double::push_context(c) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  return run_driver(Gate::initialized, [&] {
    Context* c = cuda_double::pop_context();
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(c);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxSynchronize(void) {
  return run_driver(Gate::context, [&] {
    Model& m = model();
    Lock lock(m.mu);
    m.trim_pools(cuda_double::current_context()->device);
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- cuMemAlloc / cuMemFree

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return run_driver(Gate::context, [&] {
    if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;  // as documented in cuda.h
    *dptr = 0;
    Model& m = model();
    Lock lock(m.mu);
    void* p = nullptr;
    cudaError_t const e =
        m.allocate_native(cuda_double::current_context()->device, bytesize, AllocationKind::driver, &p);
    if (e != cudaSuccess) return to_cu(e);
    *dptr = as_deviceptr(p);
    m.counters.driver_mallocs.fetch_add(1, std::memory_order_relaxed);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  return run_driver(Gate::initialized, [&] {
    if (dptr == 0) return CUDA_SUCCESS;  // as the real driver answers (cuda.h does not say)
    if (cuda_double::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    Model& m = model();
    Lock lock(m.mu);
    void* p = as_pointer(dptr);
    if (m.find_allocation(p) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    m.release(p);
    m.counters.driver_frees.fetch_add(1, std::memory_order_relaxed);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  return run_driver(Gate::context, [&] {
    if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    *free = m.free_bytes(cuda_double::current_context()->device);
    *total = config().memory;
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- memcpy / memset

CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return run_driver(Gate::context, [&] {
    if (ByteCount == 0) return CUDA_SUCCESS;
    void* dst = as_pointer(dstDevice);
    if (srcHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    if (m.allocation_containing(dst).second == nullptr || !m.range_ok(dst, ByteCount) ||
        !m.range_ok(srcHost, ByteCount))
      return CUDA_ERROR_INVALID_VALUE;
    std::memmove(dst, srcHost, ByteCount);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return run_driver(Gate::context, [&] {
    if (ByteCount == 0) return CUDA_SUCCESS;
    void const* src = as_pointer(srcDevice);
    if (dstHost == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    if (m.allocation_containing(src).second == nullptr || !m.range_ok(src, ByteCount) ||
        !m.range_ok(dstHost, ByteCount))
      return CUDA_ERROR_INVALID_VALUE;
    std::memmove(dstHost, src, ByteCount);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return run_driver(Gate::context, [&] {
    if (N == 0) return CUDA_SUCCESS;
    void* dst = as_pointer(dstDevice);
    Model& m = model();
    Lock lock(m.mu);
    if (m.allocation_containing(dst).second == nullptr || !m.range_ok(dst, N)) return CUDA_ERROR_INVALID_VALUE;
    std::memset(dst, uc, N);
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- pointer attributes

CUDA_DOUBLE_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return run_driver(Gate::initialized, [&] {
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    auto const [base, a] = m.allocation_containing(as_pointer(ptr));
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;  // not memory of this "device"
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(m.primary_context(a->device));
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = a->device; break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = as_deviceptr(base); break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = a->size; break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *static_cast<CUmemoryPool*>(data) = reinterpret_cast<CUmemoryPool>(a->pool);
        break;
      default: return CUDA_ERROR_NOT_SUPPORTED;  // not modelled by the double
    }
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- streams

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return run_driver(Gate::context, [&] {
    if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    *phStream = m.create_stream(cuda_double::current_context()->device, Flags);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  return run_driver(Gate::initialized, [&] {
    Model& m = model();
    Lock lock(m.mu);
    return m.destroy_stream(hStream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) { return stream_synchronize(hStream); }

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  return stream_synchronize(per_thread(hStream));
}

// ---------------------------------------------------------------- pools

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !m.valid_device(poolProps->location.id))
      return CUDA_ERROR_INVALID_VALUE;
    auto const handle_types = static_cast<unsigned>(poolProps->handleTypes);
    if ((handle_types & ~config().pool_handle_types) != 0) return CUDA_ERROR_NOT_SUPPORTED;
    Lock lock(m.mu);
    Pool& p = m.create_pool(poolProps->location.id, handle_types, poolProps->maxSize, /*is_default=*/false);
    *pool = reinterpret_cast<CUmemoryPool>(&p);
    m.counters.pools_created.fetch_add(1, std::memory_order_relaxed);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    Model& m = model();
    Lock lock(m.mu);
    Pool* p = m.find_pool(pool);
    if (p == nullptr || p->is_default) return CUDA_ERROR_INVALID_VALUE;
    m.destroy_pool(*p);
    m.counters.pools_destroyed.fetch_add(1, std::memory_order_relaxed);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    Pool* p = m.find_pool(pool);
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return to_cu(Model::set_pool_attribute(*p, attr, value));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return run_driver(Gate::initialized, [&] {
    if (CUresult e = pools_supported()) return e;
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Model& m = model();
    Lock lock(m.mu);
    Pool const* p = m.find_pool(pool);
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return to_cu(Model::get_pool_attribute(*p, attr, value));
  });
}

// ---------------------------------------------------------------- stream-ordered allocation

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return mem_alloc_async(dptr, bytesize, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return mem_alloc_async(dptr, bytesize, per_thread(hStream));
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                        CUstream hStream) {
  return mem_alloc_from_pool_async(dptr, bytesize, pool, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                             CUstream hStream) {
  return mem_alloc_from_pool_async(dptr, bytesize, pool, per_thread(hStream));
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return mem_free_async(dptr, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return mem_free_async(dptr, per_thread(hStream));
}

}  // extern "C"
