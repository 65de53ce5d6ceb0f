// driver_api.cpp: the CUDA driver API functions of the driver TEST DOUBLE,
// libcuda.so.1 (see cuda_double.hpp), with the CUDA 13.0 signatures of cuda.h.
// Argument checking and the CUresult codes live here; the state lives in the
// model (model.cpp), shared with the runtime double, and what the runtime API
// offers too is done once in operations.cpp, whose operation_outcome is mapped to a
// CUresult here. No function here calls another exported function: shared
// code is internal.
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <new>
#include <vector>

#include "cuda_driver_double.hpp"
#include "model.hpp"
#include "operations.hpp"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the driver double defines the plain and the _ptsz names itself"
#endif

using cuda_double::allocation_kind;
using cuda_double::config;
using cuda_double::context_state;
using cuda_double::model;
using cuda_double::model_state;
using cuda_double::operation_outcome;
namespace operations = cuda_double::operations;

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
static_assert(int{CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED} == int{cudaDevAttrMemoryPoolsSupported});
static_assert(int{CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES} ==
              int{cudaDevAttrMemoryPoolSupportedHandleTypes});
static_assert(int{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR} == int{cudaDevAttrComputeCapabilityMajor});
static_assert(int{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR} == int{cudaDevAttrComputeCapabilityMinor});
static_assert(unsigned{CU_STREAM_NON_BLOCKING} == unsigned{cudaStreamNonBlocking});
static_assert(unsigned{CU_EVENT_BLOCKING_SYNC} == unsigned{cudaEventBlockingSync});
static_assert(unsigned{CU_EVENT_DISABLE_TIMING} == unsigned{cudaEventDisableTiming});
static_assert(unsigned{CU_EVENT_INTERPROCESS} == unsigned{cudaEventInterprocess});
static_assert(unsigned{CU_EVENT_WAIT_EXTERNAL} == unsigned{cudaEventWaitExternal});
static_assert(int{CU_STREAM_CAPTURE_MODE_GLOBAL} == cuda_double::capture_mode_global);
static_assert(int{CU_STREAM_CAPTURE_MODE_THREAD_LOCAL} == cuda_double::capture_mode_thread_local);
static_assert(int{CU_STREAM_CAPTURE_MODE_RELAXED} == cuda_double::capture_mode_relaxed);
static_assert(int{CU_STREAM_CAPTURE_STATUS_NONE} == cuda_double::capture_status_none);
static_assert(int{CU_STREAM_CAPTURE_STATUS_ACTIVE} == cuda_double::capture_status_active);
static_assert(int{CU_STREAM_CAPTURE_STATUS_INVALIDATED} == cuda_double::capture_status_invalidated);
static_assert(unsigned{CU_MEM_ACCESS_FLAGS_PROT_NONE} == unsigned(cuda_double::access_level::none));
static_assert(unsigned{CU_MEM_ACCESS_FLAGS_PROT_READ} == unsigned(cuda_double::access_level::read));
static_assert(unsigned{CU_MEM_ACCESS_FLAGS_PROT_READWRITE} == unsigned(cuda_double::access_level::read_write));
static_assert(sizeof(CUmemPoolPtrExportData) == cuda_double::operations::share_data_size);
static_assert(sizeof(CUmemFabricHandle) == cuda_double::operations::share_data_size);
static_assert(sizeof(CUipcMemHandle) == cuda_double::operations::share_data_size);
static_assert(unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS} == unsigned{cudaIpcMemLazyEnablePeerAccess});

namespace {

using mutex_lock = std::lock_guard<std::mutex>;

// What a call needs before it does anything (after the stub check).
enum class call_gate {
  none,         // nothing: works before cuInit
  initialized,  // cuInit (or the runtime double) has initialized the driver
  context,      // ... and the calling thread has a current context
};

CUresult check(call_gate gate)
{
  if (gate == call_gate::none) { return CUDA_SUCCESS; }
  if (config().no_driver) { return CUDA_ERROR_STUB_LIBRARY; }
  if (!cuda_double::initialized()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (gate == call_gate::context && cuda_double::current_context() == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
  return CUDA_SUCCESS;
}

// Runs body (a callable returning CUresult) after the gate, turning exceptions
// into CUDA errors and counting failures.
template <class Body>
CUresult run_driver(call_gate gate, Body&& body) noexcept
{
  CUresult result;
  try {
    result = check(gate);
    if (result == CUDA_SUCCESS) { result = body(); }
  } catch (std::bad_alloc const&) {
    result = CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    result = CUDA_ERROR_UNKNOWN;
  }
  if (result != CUDA_SUCCESS) { cuda_double::count_failure(); }
  return result;
}

// The driver's names for the model's answers.
CUresult to_cu_result(operation_outcome outcome)
{
  switch (outcome) {
    case operation_outcome::ok: return CUDA_SUCCESS;
    case operation_outcome::invalid_value: return CUDA_ERROR_INVALID_VALUE;
    case operation_outcome::out_of_memory: return CUDA_ERROR_OUT_OF_MEMORY;
    case operation_outcome::invalid_device: return CUDA_ERROR_INVALID_DEVICE;
    case operation_outcome::not_supported: return CUDA_ERROR_NOT_SUPPORTED;
    case operation_outcome::invalid_handle: return CUDA_ERROR_INVALID_HANDLE;
    case operation_outcome::invalid_context: return CUDA_ERROR_INVALID_CONTEXT;
    case operation_outcome::capture_unsupported: return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    case operation_outcome::capture_implicit: return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    case operation_outcome::capture_invalidated: return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    case operation_outcome::capture_wrong_thread: return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    case operation_outcome::capture_merge: return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    case operation_outcome::captured_event: return CUDA_ERROR_CAPTURED_EVENT;
    case operation_outcome::illegal_state: return CUDA_ERROR_ILLEGAL_STATE;
    case operation_outcome::peer_unsupported: return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    case operation_outcome::peer_already_enabled: return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    case operation_outcome::peer_not_enabled: return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    case operation_outcome::not_permitted: return CUDA_ERROR_NOT_PERMITTED;
    case operation_outcome::not_found: return CUDA_ERROR_NOT_FOUND;
    case operation_outcome::not_ready: return CUDA_ERROR_NOT_READY;
  }
  return CUDA_ERROR_UNKNOWN;
}

void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUdeviceptr as_deviceptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

// A CUmemLocation (and access flags) in the model's terms.
operations::access_descriptor access_entry(CUmemLocation const& location, unsigned flags)
{
  operations::access_descriptor e;
  e.on_device = location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  e.device = location.id;
  e.flags = flags;
  return e;
}

// The _ptsz entry points see the null stream as the per-thread default stream.
CUstream per_thread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

// ---- shared bodies of the plain and _ptsz entry points

// operations.hpp writes the pointer for ok and out_of_memory only; *dptr follows.
CUresult store_allocation(operation_outcome outcome, void* p, CUdeviceptr* dptr)
{
  if (outcome == operation_outcome::ok || outcome == operation_outcome::out_of_memory) { *dptr = as_deviceptr(p); }
  return to_cu_result(outcome);
}

CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream stream)
{
  return run_driver(call_gate::initialized, [&] {
    void* p = nullptr;
    operation_outcome const o = operations::allocate_async(bytesize, stream, dptr != nullptr ? &p : nullptr);
    return store_allocation(o, p, dptr);
  });
}

CUresult mem_alloc_from_pool_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream)
{
  return run_driver(call_gate::initialized, [&] {
    void* p = nullptr;
    operation_outcome const o =
      operations::allocate_from_pool_async(pool, bytesize, stream, dptr != nullptr ? &p : nullptr);
    return store_allocation(o, p, dptr);
  });
}

CUresult mem_free_async(CUdeviceptr dptr, CUstream stream)
{
  return run_driver(call_gate::initialized, [&] {
    return to_cu_result(operations::free_async(as_pointer(dptr), stream, /*from_driver=*/true));
  });
}

CUresult stream_synchronize(CUstream stream)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::synchronize_stream(stream)); });
}

CUresult stream_query(CUstream stream)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::query_stream(stream)); });
}

CUresult stream_get_flags(CUstream stream, unsigned* flags)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::stream_flags(stream, flags)); });
}

CUresult stream_destroy(CUstream stream)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::destroy_stream(stream)); });
}

CUresult event_record(CUevent event, CUstream stream)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::record_event(event, stream)); });
}

CUresult stream_wait_event(CUstream stream, CUevent event, unsigned flags)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::wait_event(stream, event, flags)); });
}

CUresult stream_begin_capture(CUstream stream, CUstreamCaptureMode mode)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::begin_capture(stream, mode)); });
}

CUresult stream_end_capture(CUstream stream, CUgraph* graph)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::end_capture(stream, graph)); });
}

CUresult ipc_open_mem_handle(CUdeviceptr* pdptr, CUipcMemHandle const& handle, unsigned flags)
{
  return run_driver(call_gate::context, [&] {
    if (pdptr == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    void* p = nullptr;
    operation_outcome const o = operations::open_ipc_mem_handle(&handle, flags, &p);
    if (o == operation_outcome::ok) { *pdptr = as_deviceptr(p); }
    return to_cu_result(o);
  });
}

CUresult stream_is_capturing(CUstream stream, CUstreamCaptureStatus* status)
{
  return run_driver(call_gate::initialized, [&] {
    int s = 0;
    operation_outcome const o = operations::capture_status(stream, status != nullptr ? &s : nullptr);
    if (o == operation_outcome::ok) { *status = static_cast<CUstreamCaptureStatus>(s); }
    return to_cu_result(o);
  });
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- initialization, versions

CUDA_DOUBLE_API CUresult CUDAAPI cuInit(unsigned int Flags)
{
  return run_driver(call_gate::none, [&] {
    if (config().no_driver) { return CUDA_ERROR_STUB_LIBRARY; }
    if (cuda_double::availability() != cudaSuccess) { return CUDA_ERROR_NO_DEVICE; }
    if (Flags != 0) { return CUDA_ERROR_INVALID_VALUE; }
    cuda_double::initialize();
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDriverGetVersion(int* driverVersion)
{
  return run_driver(call_gate::none, [&] {
    if (config().no_driver) { return CUDA_ERROR_STUB_LIBRARY; }
    if (driverVersion == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    *driverVersion = cuda_double::reported_driver_version();
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- devices

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal)
{
  return run_driver(call_gate::initialized, [&] {
    if (device == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    if (!model().valid_device(ordinal)) { return CUDA_ERROR_INVALID_DEVICE; }
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetCount(int* count)
{
  return run_driver(call_gate::initialized, [&] {
    if (count == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    *count = model().device_count();
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev)
{
  return run_driver(call_gate::initialized, [&] {
    if (name == nullptr || len <= 0) { return CUDA_ERROR_INVALID_VALUE; }
    if (!model().valid_device(dev)) { return CUDA_ERROR_INVALID_DEVICE; }
    std::snprintf(name, static_cast<std::size_t>(len), "cuda_double device %d (test double, not a GPU)", dev);
    return CUDA_SUCCESS;
  });
}

// "0000:01:00.0" for device 0: the bus is the ordinal plus one, the domain
// its high bits (the NVML double reads it back).
CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev)
{
  return run_driver(call_gate::initialized, [&] {
    if (pciBusId == nullptr || len <= 0) { return CUDA_ERROR_INVALID_VALUE; }
    if (!model().valid_device(dev)) { return CUDA_ERROR_INVALID_DEVICE; }
    unsigned const bus = static_cast<unsigned>(dev) + 1;
    std::snprintf(pciBusId, static_cast<std::size_t>(len), "%04x:%02x:00.0", bus >> 8, bus & 0xffu);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::device_attribute(dev, attrib, pi)); });
}

// ---------------------------------------------------------------- contexts

CUDA_DOUBLE_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev)
{
  return run_driver(call_gate::initialized, [&] {
    if (pctx == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    model_state& m = model();
    if (!m.valid_device(dev)) { return CUDA_ERROR_INVALID_DEVICE; }
    mutex_lock lock(m.mu);
    context_state* c = m.primary_context(dev);
    ++c->retains;
    *pctx = reinterpret_cast<CUcontext>(c);
    return CUDA_SUCCESS;
  });
}

// The double has no contexts but the primary ones: a context "created" is
// the device's primary context, retained and made current. Enough for a
// program that only needs a context of its own to have been made.
// A context of its own: its legacy stream and the streams made in it are
// its own on the virtual GPU; everything else (memory, pools) is the
// device's. cuCtxDestroy_v2 ends it.
CUDA_DOUBLE_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* /*params*/, unsigned int /*flags*/,
                                                CUdevice dev)
{
  if (pctx == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
  CUresult const made = run_driver(call_gate::initialized, [&] {
    model_state& m = model();
    if (!m.valid_device(dev)) { return CUDA_ERROR_INVALID_DEVICE; }
    mutex_lock lock(m.mu);
    *pctx = reinterpret_cast<CUcontext>(m.create_context(dev));
    return CUDA_SUCCESS;
  });
  if (made != CUDA_SUCCESS) { return made; }
  return cuCtxPushCurrent_v2(*pctx);
}

// The double's primary contexts always exist: every one is active, with no flags.
CUDA_DOUBLE_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active)
{
  return run_driver(call_gate::initialized, [&] {
    if (flags == nullptr || active == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    if (!model().valid_device(dev)) { return CUDA_ERROR_INVALID_DEVICE; }
    *flags = 0;
    *active = 1;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
  return run_driver(call_gate::initialized, [&] {
    model_state& m = model();
    if (!m.valid_device(dev)) { return CUDA_ERROR_INVALID_DEVICE; }
    mutex_lock lock(m.mu);
    context_state* c = m.primary_context(dev);
    if (c->retains == 0) {
      return CUDA_ERROR_INVALID_CONTEXT;  // as documented in cuda.h
    }
    --c->retains;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx)
{
  return run_driver(call_gate::initialized, [&] {
    if (pctx == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    *pctx = reinterpret_cast<CUcontext>(cuda_double::current_context());
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
  return run_driver(call_gate::initialized, [&] {
    context_state* c = nullptr;
    if (ctx != nullptr) {
      c = model().find_context(ctx);
      if (c == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
    }
    cuda_double::set_current_context(c);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxGetDevice(CUdevice* device)
{
  return run_driver(call_gate::context, [&] {
    if (device == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    *device = cuda_double::current_context()->device;
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
  return run_driver(call_gate::initialized, [&] {
    context_state* c = ctx == nullptr ? nullptr : model().find_context(ctx);
    if (c == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
    return cuda_double::push_context(c) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx)
{
  return run_driver(call_gate::initialized, [&] {
    context_state* c = cuda_double::pop_context();
    if (c == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
    if (pctx != nullptr) { *pctx = reinterpret_cast<CUcontext>(c); }
    return CUDA_SUCCESS;
  });
}

// A made context only; popped when it is the calling thread's current one.
CUDA_DOUBLE_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
  return run_driver(call_gate::initialized, [&] {
    context_state* c = ctx == nullptr ? nullptr : model().find_context(ctx);
    if (c == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
    CUresult const r = to_cu_result(operations::destroy_context(*c));
    if (r == CUDA_SUCCESS && cuda_double::current_context() == c) { cuda_double::pop_context(); }
    return r;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxSynchronize(void)
{
  return run_driver(call_gate::context, [&] {
    context_state const* c = cuda_double::current_context();
    return to_cu_result(operations::synchronize_device(c->device, c->domain));
  });
}

// CUDA 13: the context given, or the current one when it is null.
CUDA_DOUBLE_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
  return run_driver(ctx == nullptr ? call_gate::context : call_gate::initialized, [&] {
    context_state const* c = ctx == nullptr ? cuda_double::current_context() : model().find_context(ctx);
    if (c == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
    return to_cu_result(operations::synchronize_device(c->device, c->domain));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::reset_device(dev)); });
}

// ---------------------------------------------------------------- cuMemAlloc / cuMemFree

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize)
{
  return run_driver(call_gate::context, [&] {
    if (dptr == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    if (bytesize == 0) {
      return CUDA_ERROR_INVALID_VALUE;  // as documented in cuda.h
    }
    *dptr = 0;
    void* p = nullptr;
    operation_outcome const o =
      operations::allocate(cuda_double::current_context()->device, bytesize, allocation_kind::driver, &p);
    if (o != operation_outcome::ok) { return to_cu_result(o); }
    *dptr = as_deviceptr(p);
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- pinned host memory

namespace {

constexpr unsigned host_alloc_flags =
  CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

CUresult host_alloc(void** pp, std::size_t bytesize, unsigned flags)
{
  return run_driver(call_gate::context, [&] {
    if (pp == nullptr || bytesize == 0 || (flags & ~host_alloc_flags) != 0) { return CUDA_ERROR_INVALID_VALUE; }
    *pp = nullptr;
    return to_cu_result(operations::allocate_host(cuda_double::current_context()->device, bytesize, flags, pp));
  });
}

}  // namespace

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }

CUDA_DOUBLE_API CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags)
{
  return host_alloc(pp, bytesize, Flags);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFreeHost(void* p)
{
  return run_driver(call_gate::context, [&] {
    if (p == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    return to_cu_result(operations::release_host(p));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags)
{
  return run_driver(call_gate::context, [&] {
    if (pdptr == nullptr || Flags != 0) { return CUDA_ERROR_INVALID_VALUE; }
    void* device_address = nullptr;
    operation_outcome const o = operations::host_device_pointer(p, &device_address);
    if (o == operation_outcome::ok) { *pdptr = as_deviceptr(device_address); }
    return to_cu_result(o);
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p)
{
  return run_driver(call_gate::context, [&] {
    if (pFlags == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    return to_cu_result(operations::host_flags(p, pFlags));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                                    size_t Height, unsigned int ElementSizeBytes)
{
  return run_driver(call_gate::context, [&] {
    if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) { return CUDA_ERROR_INVALID_VALUE; }
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) {
      return CUDA_ERROR_INVALID_VALUE;  // as documented in cuda.h
    }
    *dptr = 0;
    void* p = nullptr;
    operation_outcome const o = operations::allocate_pitched(cuda_double::current_context()->device, WidthInBytes,
                                                             Height, allocation_kind::driver, &p, pPitch);
    if (o != operation_outcome::ok) { return to_cu_result(o); }
    *dptr = as_deviceptr(p);
    return CUDA_SUCCESS;
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
  return run_driver(call_gate::initialized, [&] {
    if (dptr == 0) {
      return CUDA_SUCCESS;  // as the real driver answers (cuda.h does not say)
    }
    if (cuda_double::current_context() == nullptr) { return CUDA_ERROR_INVALID_CONTEXT; }
    return to_cu_result(operations::release(as_pointer(dptr), allocation_kind::driver));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total)
{
  return run_driver(call_gate::context, [&] {
    if (free == nullptr || total == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    model_state& m = model();
    mutex_lock lock(m.mu);
    *free = m.free_bytes(cuda_double::current_context()->device);
    *total = config().memory;
    return CUDA_SUCCESS;
  });
}

// ---------------------------------------------------------------- memcpy / memset

CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(
      operations::copy(as_pointer(dstDevice), srcHost, ByteCount, operations::copy_direction::host_to_device));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(
      operations::copy(dstHost, as_pointer(srcDevice), ByteCount, operations::copy_direction::device_to_host));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
  return run_driver(call_gate::context, [&] { return to_cu_result(operations::fill(as_pointer(dstDevice), uc, N)); });
}

// ---------------------------------------------------------------- pointer attributes, address ranges

CUDA_DOUBLE_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr)
{
  return run_driver(call_gate::context, [&] {
    void* base = nullptr;
    operation_outcome const o = operations::address_range(as_pointer(dptr), pbase != nullptr ? &base : nullptr, psize);
    if (o == operation_outcome::ok && pbase != nullptr) { *pbase = as_deviceptr(base); }
    return to_cu_result(o);  // not device memory: CUDA_ERROR_NOT_FOUND, as cuda.h documents
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
  return run_driver(call_gate::initialized, [&] {
    if (data == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    model_state& m = model();
    mutex_lock lock(m.mu);
    auto const [base, a] = m.allocation_containing(as_pointer(ptr));
    if (a == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;  // not memory of this "device"
    }
    bool const host = a->kind == allocation_kind::host || (a->pool != nullptr && a->pool->on_host);
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (a->device < 0) { return CUDA_ERROR_INVALID_VALUE; }  // a pool in host memory: no context's
        *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(m.primary_context(a->device));
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host) { return CUDA_ERROR_INVALID_VALUE; }
        *static_cast<void**>(data) = as_pointer(ptr);
        break;
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

// Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on memory of the double (value not
// NULL), which changes nothing here: the double's memory operations are all
// synchronous already.
CUDA_DOUBLE_API CUresult CUDAAPI cuPointerSetAttribute(void const* value, CUpointer_attribute attribute,
                                                       CUdeviceptr ptr)
{
  return run_driver(call_gate::initialized, [&] {
    if (value == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    if (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) { return CUDA_ERROR_NOT_SUPPORTED; }
    model_state& m = model();
    mutex_lock lock(m.mu);
    return m.allocation_containing(as_pointer(ptr)).second != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

// ---------------------------------------------------------------- streams

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(operations::create_stream(cuda_double::current_context()->device, Flags, 0, phStream));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(operations::create_stream(cuda_double::current_context()->device, flags, priority, phStream));
  });
}

// Exported as "cuStreamDestroy" (see cuda_driver_double.hpp): the CUDA 2.0 ABI.
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamDestroy_v1(CUstream hStream) { return stream_destroy(hStream); }

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int* flags)
{
  return stream_get_flags(hStream, flags);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags)
{
  return stream_get_flags(per_thread(hStream), flags);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) { return stream_synchronize(hStream); }

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
  return stream_synchronize(per_thread(hStream));
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamQuery(CUstream hStream) { return stream_query(hStream); }

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) { return stream_query(per_thread(hStream)); }

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
  return stream_wait_event(hStream, hEvent, Flags);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
  return stream_wait_event(per_thread(hStream), hEvent, Flags);
}

// Launches run nothing; the stream must be one (cuda_double_set_stream_busy
// says whether it has work in progress). Under the virtual GPU a launch is a
// task on the stream, which checks the memory cuda_double_touch_kernel names.
namespace {
CUresult launch_kernel(CUfunction f, CUstream stream, void** params)
{
  unsigned flags = 0;
  if (CUresult r = stream_get_flags(stream, &flags); r != CUDA_SUCCESS) { return r; }
  bool const touching = reinterpret_cast<void*>(f) == cuda_double_touch_kernel();
  return to_cu_result(operations::launch(stream, params, touching));
}
}  // namespace

CUDA_DOUBLE_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int /*gridDimX*/, unsigned int /*gridDimY*/,
                                                unsigned int /*gridDimZ*/, unsigned int /*blockDimX*/,
                                                unsigned int /*blockDimY*/, unsigned int /*blockDimZ*/,
                                                unsigned int /*sharedMemBytes*/, CUstream hStream, void** kernelParams,
                                                void** /*extra*/)
{
  return launch_kernel(f, hStream, kernelParams);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int /*gridDimX*/, unsigned int /*gridDimY*/,
                                                     unsigned int /*gridDimZ*/, unsigned int /*blockDimX*/,
                                                     unsigned int /*blockDimY*/, unsigned int /*blockDimZ*/,
                                                     unsigned int /*sharedMemBytes*/, CUstream hStream,
                                                     void** kernelParams, void** /*extra*/)
{
  return launch_kernel(f, per_thread(hStream), kernelParams);
}

// A host function is a task on the stream like a kernel; the function itself is not called.
CUDA_DOUBLE_API CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn /*fn*/, void* /*userData*/)
{
  return launch_kernel(nullptr, hStream, nullptr);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn /*fn*/, void* /*userData*/)
{
  return launch_kernel(nullptr, per_thread(hStream), nullptr);
}

namespace {
CUresult copy_on(CUstream stream, CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
  return run_driver(call_gate::initialized, [&] {
    return to_cu_result(
      operations::copy_async(stream, reinterpret_cast<void*>(dst), reinterpret_cast<void const*>(src), bytes));
  });
}

CUresult set_on(CUstream stream, CUdeviceptr dst, unsigned char value, size_t bytes)
{
  return run_driver(call_gate::initialized, [&] {
    return to_cu_result(operations::fill_async(stream, reinterpret_cast<void*>(dst), value, bytes));
  });
}
}  // namespace

CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
  return copy_on(hStream, dst, src, ByteCount);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                                    CUstream hStream)
{
  return copy_on(per_thread(hStream), dst, src, ByteCount);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
  return set_on(hStream, dstDevice, uc, N);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                                      CUstream hStream)
{
  return set_on(per_thread(hStream), dstDevice, uc, N);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuDoubleFutureFunction(CUstream /*hStream*/) { return CUDA_SUCCESS; }

// ---------------------------------------------------------------- events

CUDA_DOUBLE_API CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(operations::create_event(cuda_double::current_context()->device, Flags, phEvent));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::destroy_event(hEvent)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
  return event_record(hEvent, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
  return event_record(hEvent, per_thread(hStream));
}

CUDA_DOUBLE_API CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::query_event(hEvent, false)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::query_event(hEvent, true)); });
}

// ---------------------------------------------------------------- stream capture, graphs

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
  return stream_begin_capture(hStream, mode);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
  return stream_begin_capture(per_thread(hStream), mode);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph)
{
  return stream_end_capture(hStream, phGraph);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph)
{
  return stream_end_capture(per_thread(hStream), phGraph);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus)
{
  return stream_is_capturing(hStream, captureStatus);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus)
{
  return stream_is_capturing(per_thread(hStream), captureStatus);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode)
{
  return run_driver(call_gate::initialized, [&] {
    if (mode == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
    int m = *mode;
    operation_outcome const o = operations::exchange_capture_mode(&m);
    if (o == operation_outcome::ok) { *mode = static_cast<CUstreamCaptureMode>(m); }
    return to_cu_result(o);
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::destroy_graph(hGraph)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                             unsigned long long /*flags*/)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::instantiate_graph(hGraph, phGraphExec)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
  return run_driver(call_gate::context, [&] { return to_cu_result(operations::launch_graph(hGraphExec, hStream)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
  return run_driver(call_gate::context,
                    [&] { return to_cu_result(operations::launch_graph(hGraphExec, per_thread(hStream))); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::destroy_graph_exec(hGraphExec)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::graph_nodes(hGraph, nodes, numNodes)); });
}

// ---------------------------------------------------------------- pools

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps)
{
  return run_driver(call_gate::initialized, [&] {
    if (poolProps == nullptr) { return to_cu_result(operations::create_pool(nullptr, pool)); }
    auto const properties = operations::pool_properties(*poolProps, CU_MEM_ALLOCATION_TYPE_PINNED,
                                                        CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST);
    return to_cu_result(operations::create_pool(&properties, pool));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::destroy_pool(pool)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::set_pool_attribute(pool, attr, value)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::get_pool_attribute(pool, attr, value)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
  return run_driver(call_gate::initialized, [&] { return to_cu_result(operations::trim_pool(pool, minBytesToKeep)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count)
{
  return run_driver(call_gate::initialized, [&] {
    if (map == nullptr) { return to_cu_result(operations::set_pool_access(pool, nullptr, count)); }
    std::vector<operations::access_descriptor> entries(count);
    for (std::size_t i = 0; i < count; ++i) {
      entries[i] = access_entry(map[i].location, static_cast<unsigned>(map[i].flags));
    }
    return to_cu_result(operations::set_pool_access(pool, entries.data(), count));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool,
                                                    CUmemLocation* location)
{
  return run_driver(call_gate::initialized, [&] {
    // No location: an entry that is no device location (invalid_value, after the pool checks).
    operations::access_descriptor const where =
      location != nullptr ? access_entry(*location, 0) : operations::access_descriptor{};
    unsigned f = 0;
    operation_outcome const o = operations::get_pool_access(memPool, where, flags != nullptr ? &f : nullptr);
    if (o == operation_outcome::ok) { *flags = static_cast<CUmemAccess_flags>(f); }
    return to_cu_result(o);
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                                  CUmemAllocationHandleType handleType,
                                                                  unsigned long long flags)
{
  return run_driver(call_gate::initialized, [&] {
    return to_cu_result(operations::export_pool(pool, static_cast<unsigned>(handleType), flags, handle_out));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::export_pool_pointer(as_pointer(ptr), shareData_out)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle,
                                                                    CUmemAllocationHandleType handleType,
                                                                    unsigned long long flags)
{
  // Needs a current context; the imported pool is on the exporting pool's
  // device, which may be another one.
  return run_driver(call_gate::context, [&] {
    return to_cu_result(operations::import_pool(handle, static_cast<unsigned>(handleType), flags, pool_out));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                                        CUmemPoolPtrExportData* shareData)
{
  return run_driver(call_gate::initialized, [&] {
    void* p = nullptr;
    operation_outcome const o = operations::import_pool_pointer(pool, shareData, ptr_out != nullptr ? &p : nullptr);
    if (o == operation_outcome::ok) { *ptr_out = as_deviceptr(p); }
    return to_cu_result(o);
  });
}

// ---------------------------------------------------------------- legacy IPC

CUDA_DOUBLE_API CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::ipc_mem_handle(as_pointer(dptr), pHandle)); });
}

// Exported as "cuIpcOpenMemHandle" (see cuda_driver_double.hpp): the CUDA 4.1
// ABI, the same signature and behaviour.
CUDA_DOUBLE_API CUresult CUDAAPI cuIpcOpenMemHandle_v1(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags)
{
  return ipc_open_mem_handle(pdptr, handle, Flags);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags)
{
  return ipc_open_mem_handle(pdptr, handle, Flags);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
  return run_driver(call_gate::context,
                    [&] { return to_cu_result(operations::close_ipc_mem_handle(as_pointer(dptr))); });
}

// ---------------------------------------------------------------- peer access

CUDA_DOUBLE_API CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev)
{
  return run_driver(call_gate::initialized,
                    [&] { return to_cu_result(operations::can_access_peer(dev, peerDev, canAccessPeer)); });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(operations::enable_peer_access(*cuda_double::current_context(), peerContext, Flags));
  });
}

CUDA_DOUBLE_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
  return run_driver(call_gate::context, [&] {
    return to_cu_result(operations::disable_peer_access(*cuda_double::current_context(), peerContext));
  });
}

// ---------------------------------------------------------------- stream-ordered allocation

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream)
{
  return mem_alloc_async(dptr, bytesize, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream)
{
  return mem_alloc_async(dptr, bytesize, per_thread(hStream));
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                         CUstream hStream)
{
  return mem_alloc_from_pool_async(dptr, bytesize, pool, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                              CUstream hStream)
{
  return mem_alloc_from_pool_async(dptr, bytesize, pool, per_thread(hStream));
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
  return mem_free_async(dptr, hStream);
}

CUDA_DOUBLE_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
  return mem_free_async(dptr, per_thread(hStream));
}

}  // extern "C"
