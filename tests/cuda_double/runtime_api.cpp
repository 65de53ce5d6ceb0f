// runtime_api.cpp: the CUDA runtime API functions of the runtime TEST DOUBLE,
// libcudart_double.so (see cuda_double.hpp), with the CUDA 13.0 signatures of
// cuda_runtime_api.h. Argument checking, error reporting and the runtime's own
// per-thread state (current device, last error) live here; the state they work
// on is the driver double's model (model.hpp).
//
// Two ways into the driver double, as in the real runtime's split:
//   * memory and pools (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset, the
//     pool and stream-ordered calls but the pool access and export ones,
//     ...): the internal API (operations.hpp), whose operation_outcome is mapped to a
//     cudaError_t here;
//   * streams, events, stream capture, graphs, synchronization, reset, peer
//     access, pool access, pool exports and imports and legacy IPC: the driver's CUDA
//     functions, through pointers fetched once with
//     cuGetProcAddress_v2 (itself found with dlsym on the loaded
//     libcuda.so.1), never through a call of an exported symbol by name, so
//     an interposer that answers cuGetProcAddress lookups sees these calls as
//     it would see the real runtime's; their CUresult is mapped here.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda_double.hpp"
#include "model.hpp"
#include "operations.hpp"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the CUDA double exports the legacy-default-stream names (cudaMemcpy, not cudaMemcpy_ptds)"
#endif

using cuda_double::allocation_kind;
using cuda_double::config;
using cuda_double::context_state;
using cuda_double::model;
using cuda_double::model_state;
using cuda_double::operation_outcome;
namespace operations = cuda_double::operations;

// Passed to the driver as they are.
static_assert(sizeof(cudaStreamCaptureStatus) == sizeof(CUstreamCaptureStatus));
static_assert(int{cudaStreamCaptureStatusActive} == int{CU_STREAM_CAPTURE_STATUS_ACTIVE});
static_assert(int{cudaStreamCaptureStatusInvalidated} == int{CU_STREAM_CAPTURE_STATUS_INVALIDATED});
static_assert(sizeof(cudaStreamCaptureMode) == sizeof(CUstreamCaptureMode));
static_assert(int{cudaStreamCaptureModeThreadLocal} == int{CU_STREAM_CAPTURE_MODE_THREAD_LOCAL});
static_assert(int{cudaStreamCaptureModeRelaxed} == int{CU_STREAM_CAPTURE_MODE_RELAXED});
static_assert(sizeof(cudaMemLocation) == sizeof(CUmemLocation));
static_assert(offsetof(cudaMemLocation, type) == offsetof(CUmemLocation, type));
static_assert(offsetof(cudaMemLocation, id) == offsetof(CUmemLocation, id));
static_assert(sizeof(cudaMemLocationType) == sizeof(CUmemLocationType));
static_assert(int{cudaMemLocationTypeDevice} == int{CU_MEM_LOCATION_TYPE_DEVICE});
static_assert(sizeof(cudaMemAccessDesc) == sizeof(CUmemAccessDesc));
static_assert(offsetof(cudaMemAccessDesc, location) == offsetof(CUmemAccessDesc, location));
static_assert(offsetof(cudaMemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags));
static_assert(sizeof(cudaMemAccessFlags) == sizeof(CUmemAccess_flags));
static_assert(int{cudaMemAccessFlagsProtNone} == int{CU_MEM_ACCESS_FLAGS_PROT_NONE});
static_assert(int{cudaMemAccessFlagsProtRead} == int{CU_MEM_ACCESS_FLAGS_PROT_READ});
static_assert(int{cudaMemAccessFlagsProtReadWrite} == int{CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
static_assert(sizeof(cudaMemPoolPtrExportData) == sizeof(CUmemPoolPtrExportData));
static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle));
static_assert(unsigned{cudaMemHandleTypeFabric} == unsigned{CU_MEM_HANDLE_TYPE_FABRIC});
static_assert(unsigned{cudaMemHandleTypePosixFileDescriptor} == unsigned{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR});

namespace {

using mutex_lock = std::lock_guard<std::mutex>;

// The runtime's per-thread state.
thread_local int t_runtime_device = 0;  // cudaSetDevice's, used while no context is current
thread_local cudaError_t t_last_error = cudaSuccess;

constexpr bool gated_call = true;  // fails first when there is no driver / no device
constexpr bool ungated_call = false;

// As the real runtime does on its first call: initializes the driver (cuInit)
// once the configuration says there is one with devices.
cudaError_t available()
{
  cudaError_t const e = cuda_double::availability();
  if (e == cudaSuccess) { cuda_double::initialize(); }
  return e;
}

// The device the calling thread works on: that of the current context, after
// making the runtime device's primary context current when none is (as the
// real runtime does before any work).
int context_device()
{
  context_state* c = cuda_double::current_context();
  if (c == nullptr) {
    c = model().primary_context(t_runtime_device);
    cuda_double::set_current_context(c);
  }
  return c->device;
}

// The device cudaGetDevice reports: the current context's, else the runtime device.
int reported_device()
{
  context_state const* c = cuda_double::current_context();
  return c != nullptr ? c->device : t_runtime_device;
}

// Records a failing result as the calling thread's last error and counts it.
cudaError_t record(cudaError_t result)
{
  if (result != cudaSuccess) {
    t_last_error = result;
    cuda_double::count_failure();
  }
  return result;
}

// Runs body (a callable returning cudaError_t), turning exceptions into CUDA
// errors, and records the result. gated: fail first when no driver / no device.
// A failing driver function called meanwhile does not count on its own (see
// cuda_double::runtime_call_scope): the runtime call counts once.
template <class Body>
cudaError_t run_api(bool gated, Body&& body) noexcept
{
  cudaError_t result;
  try {
    cuda_double::runtime_call_scope const in_runtime;
    result = gated ? available() : cudaSuccess;
    if (result == cudaSuccess) { result = body(); }
  } catch (std::bad_alloc const&) {
    result = cudaErrorMemoryAllocation;
  } catch (...) {
    result = cudaErrorUnknown;
  }
  return record(result);
}

// The runtime's names for the model's answers.
cudaError_t to_cuda_error(operation_outcome outcome)
{
  switch (outcome) {
    case operation_outcome::ok: return cudaSuccess;
    case operation_outcome::invalid_value: return cudaErrorInvalidValue;
    case operation_outcome::out_of_memory: return cudaErrorMemoryAllocation;
    case operation_outcome::invalid_device: return cudaErrorInvalidDevice;
    case operation_outcome::not_supported: return cudaErrorNotSupported;
    case operation_outcome::invalid_handle: return cudaErrorInvalidResourceHandle;
    // The runtime's name for CUDA_ERROR_INVALID_CONTEXT. Not expected here:
    // every call makes a context current (context_device) before the model
    // looks for one.
    case operation_outcome::invalid_context: return cudaErrorDeviceUninitialized;
    case operation_outcome::capture_unsupported: return cudaErrorStreamCaptureUnsupported;
    case operation_outcome::capture_implicit: return cudaErrorStreamCaptureImplicit;
    case operation_outcome::capture_invalidated: return cudaErrorStreamCaptureInvalidated;
    case operation_outcome::capture_wrong_thread: return cudaErrorStreamCaptureWrongThread;
    case operation_outcome::capture_merge: return cudaErrorStreamCaptureMerge;
    case operation_outcome::captured_event: return cudaErrorCapturedEvent;
    case operation_outcome::illegal_state: return cudaErrorIllegalState;
    case operation_outcome::peer_unsupported: return cudaErrorPeerAccessUnsupported;
    case operation_outcome::peer_already_enabled: return cudaErrorPeerAccessAlreadyEnabled;
    case operation_outcome::peer_not_enabled: return cudaErrorPeerAccessNotEnabled;
    case operation_outcome::not_permitted: return cudaErrorNotPermitted;
    case operation_outcome::not_found: return cudaErrorSymbolNotFound;  // as from_cu_result's CUDA_ERROR_NOT_FOUND
    case operation_outcome::not_ready: return cudaErrorNotReady;
  }
  return cudaErrorUnknown;
}

// The runtime's names for the driver's answers (those the driver double gives;
// anything else is cudaErrorUnknown).
cudaError_t from_cu_result(CUresult r)
{
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_STUB_LIBRARY: return cudaErrorStubLibrary;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_CAPTURED_EVENT: return cudaErrorCapturedEvent;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return cudaErrorPeerAccessUnsupported;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return cudaErrorPeerAccessAlreadyEnabled;
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return cudaErrorPeerAccessNotEnabled;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    default: return cudaErrorUnknown;
  }
}

// ---- the driver functions the runtime calls, fetched once

// What the runtime asks cuGetProcAddress_v2 for: its own CUDA version, default
// flags (the legacy default stream: this runtime exports the plain names).
constexpr int lookup_version = 13000;

struct driver_entry_points {
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamCreateWithPriority) stream_create_with_priority = nullptr;
  decltype(&::cuStreamDestroy_v2) stream_destroy = nullptr;
  decltype(&::cuStreamGetFlags) stream_get_flags = nullptr;
  decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&::cuStreamQuery) stream_query = nullptr;
  decltype(&::cuStreamWaitEvent) stream_wait_event = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventDestroy_v2) event_destroy = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventQuery) event_query = nullptr;
  decltype(&::cuEventSynchronize) event_synchronize = nullptr;
  decltype(&::cuStreamBeginCapture_v2) stream_begin_capture = nullptr;
  decltype(&::cuStreamEndCapture) stream_end_capture = nullptr;
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuThreadExchangeStreamCaptureMode) thread_exchange_stream_capture_mode = nullptr;
  decltype(&::cuGraphDestroy) graph_destroy = nullptr;
  decltype(&::cuGraphGetNodes) graph_get_nodes = nullptr;
  decltype(&::cuCtxSynchronize_v2) ctx_synchronize = nullptr;  // CUDA 13's: the context it is given
  decltype(&::cuDevicePrimaryCtxReset_v2) device_primary_ctx_reset = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) device_primary_ctx_retain = nullptr;
  decltype(&::cuDeviceCanAccessPeer) device_can_access_peer = nullptr;
  decltype(&::cuCtxEnablePeerAccess) ctx_enable_peer_access = nullptr;
  decltype(&::cuCtxDisablePeerAccess) ctx_disable_peer_access = nullptr;
  decltype(&::cuMemPoolSetAccess) mem_pool_set_access = nullptr;
  decltype(&::cuMemPoolGetAccess) mem_pool_get_access = nullptr;
  decltype(&::cuMemPoolExportToShareableHandle) mem_pool_export_to_shareable_handle = nullptr;
  decltype(&::cuMemPoolExportPointer) mem_pool_export_pointer = nullptr;
  decltype(&::cuIpcGetMemHandle) ipc_get_mem_handle = nullptr;
  decltype(&::cuMemPoolImportFromShareableHandle) mem_pool_import_from_shareable_handle = nullptr;
  decltype(&::cuMemPoolImportPointer) mem_pool_import_pointer = nullptr;
  decltype(&::cuIpcOpenMemHandle_v2) ipc_open_mem_handle = nullptr;
  decltype(&::cuIpcCloseMemHandle) ipc_close_mem_handle = nullptr;
  decltype(&::cuMemGetInfo_v2) mem_get_info = nullptr;
  decltype(&::cuLaunchHostFunc) launch_host_func = nullptr;
  decltype(&::cuMemcpyAsync) memcpy_async = nullptr;
  decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) graph_instantiate = nullptr;
  decltype(&::cuGraphLaunch) graph_launch = nullptr;
  decltype(&::cuGraphExecDestroy) graph_exec_destroy = nullptr;
};

// The real CUDA 13 runtime fetches cuDevicePrimaryCtxReset as of CUDA 7.0,
// an ABI whose entry point is not the _v2 one: so does this one.
constexpr int reset_lookup_version = 7000;

template <class F>
void fetch(decltype(&::cuGetProcAddress_v2) get, char const* name, F& slot, int version = lookup_version)
{
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get(name, &pfn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
      status == CU_GET_PROC_ADDRESS_SUCCESS) {
    slot = reinterpret_cast<F>(pfn);
  }
}

// Looks every entry point up, once (thread-safe: a function-local static), on
// the libcuda.so.1 already loaded (this library needs it); an entry point that
// cannot be found stays null.
driver_entry_points const& driver()
{
  static driver_entry_points const d = [] {
    driver_entry_points out;
    void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);  // kept for the life of the process
    if (handle == nullptr) { return out; }
    auto const get = reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(dlsym(handle, "cuGetProcAddress_v2"));
    if (get == nullptr) { return out; }
    fetch(get, "cuStreamCreate", out.stream_create);
    fetch(get, "cuMemGetInfo", out.mem_get_info);
    fetch(get, "cuStreamCreateWithPriority", out.stream_create_with_priority);
    fetch(get, "cuStreamDestroy", out.stream_destroy);
    fetch(get, "cuStreamGetFlags", out.stream_get_flags);
    fetch(get, "cuStreamSynchronize", out.stream_synchronize);
    fetch(get, "cuStreamQuery", out.stream_query);
    fetch(get, "cuStreamWaitEvent", out.stream_wait_event);
    fetch(get, "cuEventCreate", out.event_create);
    fetch(get, "cuEventDestroy", out.event_destroy);
    fetch(get, "cuEventRecord", out.event_record);
    fetch(get, "cuEventQuery", out.event_query);
    fetch(get, "cuEventSynchronize", out.event_synchronize);
    fetch(get, "cuStreamBeginCapture", out.stream_begin_capture);
    fetch(get, "cuStreamEndCapture", out.stream_end_capture);
    fetch(get, "cuStreamIsCapturing", out.stream_is_capturing);
    fetch(get, "cuThreadExchangeStreamCaptureMode", out.thread_exchange_stream_capture_mode);
    fetch(get, "cuGraphDestroy", out.graph_destroy);
    fetch(get, "cuGraphGetNodes", out.graph_get_nodes);
    fetch(get, "cuCtxSynchronize", out.ctx_synchronize);
    fetch(get, "cuDevicePrimaryCtxReset", out.device_primary_ctx_reset, reset_lookup_version);
    fetch(get, "cuDevicePrimaryCtxRetain", out.device_primary_ctx_retain);
    fetch(get, "cuDeviceCanAccessPeer", out.device_can_access_peer);
    fetch(get, "cuCtxEnablePeerAccess", out.ctx_enable_peer_access);
    fetch(get, "cuCtxDisablePeerAccess", out.ctx_disable_peer_access);
    fetch(get, "cuMemPoolSetAccess", out.mem_pool_set_access);
    fetch(get, "cuMemPoolGetAccess", out.mem_pool_get_access);
    fetch(get, "cuMemPoolExportToShareableHandle", out.mem_pool_export_to_shareable_handle);
    fetch(get, "cuMemPoolExportPointer", out.mem_pool_export_pointer);
    fetch(get, "cuIpcGetMemHandle", out.ipc_get_mem_handle);
    fetch(get, "cuMemPoolImportFromShareableHandle", out.mem_pool_import_from_shareable_handle);
    fetch(get, "cuMemPoolImportPointer", out.mem_pool_import_pointer);
    fetch(get, "cuIpcOpenMemHandle", out.ipc_open_mem_handle);
    fetch(get, "cuIpcCloseMemHandle", out.ipc_close_mem_handle);
    fetch(get, "cuLaunchHostFunc", out.launch_host_func);
    fetch(get, "cuMemcpyAsync", out.memcpy_async);
    fetch(get, "cuMemsetD8Async", out.memset_d8_async);
    fetch(get, "cuGraphInstantiateWithFlags", out.graph_instantiate);
    fetch(get, "cuGraphLaunch", out.graph_launch);
    fetch(get, "cuGraphExecDestroy", out.graph_exec_destroy);
    return out;
  }();
  return d;
}

// Calls a driver entry point of driver() and maps its answer; a missing one
// (a driver without it) is cudaErrorCallRequiresNewerDriver.
template <class F, class... Args>
cudaError_t call(F driver_entry_points::*entry, Args... args)
{
  F const f = driver().*entry;
  if (f == nullptr) { return cudaErrorCallRequiresNewerDriver; }
  return from_cu_result(f(args...));
}

CUdeviceptr as_deviceptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

// The primary context of a valid `device`, as the real runtime holds the
// contexts it works with: retained through the driver (cuDevicePrimaryCtxRetain)
// the first time the runtime needs it, and kept for the life of the process.
// Used for the peer device of cudaDeviceEnablePeerAccess /
// cudaDeviceDisablePeerAccess.
cudaError_t held_primary_context(int device, CUcontext& out)
{
  static std::mutex mu;
  static CUcontext held[cuda_double::max_devices] = {};  // trivially destructible: works during exit
  std::lock_guard<std::mutex> const lock(mu);
  CUcontext& slot = held[device];
  if (slot == nullptr) {
    if (cudaError_t const e = call(&driver_entry_points::device_primary_ctx_retain, &slot, CUdevice{device})) {
      return e;
    }
  }
  out = slot;
  return cudaSuccess;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------- versions

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDriverGetVersion(int* driverVersion)
{
  return run_api(ungated_call, [&] {
    if (driverVersion == nullptr) { return cudaErrorInvalidValue; }
    *driverVersion = config().no_driver ? 0 : cuda_double::reported_driver_version();
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* runtimeVersion)
{
  return run_api(ungated_call, [&] {
    if (runtimeVersion == nullptr) { return cudaErrorInvalidValue; }
    *runtimeVersion = cuda_double::runtime_version;
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- errors

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetLastError(void)
{
  cudaError_t const e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return t_last_error; }

// ---------------------------------------------------------------- devices

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetDeviceCount(int* count)
{
  return run_api(ungated_call, [&] {
    if (count == nullptr) { return cudaErrorInvalidValue; }
    *count = 0;
    if (cudaError_t e = available()) { return e; }
    *count = config().devices;
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGetDevice(int* device)
{
  ++model().counters.runtime_device_queries;
  return run_api(gated_call, [&] {
    if (device == nullptr) { return cudaErrorInvalidValue; }
    *device = reported_device();
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaSetDevice(int device)
{
  return run_api(gated_call, [&] {
    model_state& m = model();
    if (!m.valid_device(device)) { return cudaErrorInvalidDevice; }
    t_runtime_device = device;
    cuda_double::set_current_context(m.primary_context(device));
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device)
{
  return run_api(gated_call, [&] { return to_cuda_error(operations::device_attribute(device, attr, value)); });
}

// As the real runtime: through the cuMemGetInfo it fetched (the driver's
// answer, for the current context's device).
CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total)
{
  return run_api(gated_call, [&] {
    context_device();
    if (free == nullptr || total == nullptr) { return cudaErrorInvalidValue; }
    return call(&driver_entry_points::mem_get_info, free, total);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
  return run_api(gated_call, [&] {
    context_device();
    // As CUDA 13's runtime: the context named (the current one, its device's primary).
    return call(&driver_entry_points::ctx_synchronize, reinterpret_cast<CUcontext>(cuda_double::current_context()));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceReset(void)
{
  return run_api(gated_call, [&] {
    // The current device, as cudaGetDevice reports it; no context is made
    // current for it.
    return call(&driver_entry_points::device_primary_ctx_reset, CUdevice{reported_device()});
  });
}

// ---------------------------------------------------------------- cudaMalloc / cudaFree

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size)
{
  return run_api(gated_call, [&] {
    int const device = context_device();
    if (devPtr == nullptr) { return cudaErrorInvalidValue; }
    *devPtr = nullptr;
    if (size == 0) { return cudaSuccess; }
    return to_cuda_error(operations::allocate(device, size, allocation_kind::runtime, devPtr));
  });
}

// ---------------------------------------------------------------- pinned host memory

namespace {

constexpr unsigned host_alloc_flags = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;

cudaError_t host_alloc(void** ptr, std::size_t size, unsigned flags)
{
  return run_api(gated_call, [&] {
    int const device = context_device();
    if (ptr == nullptr || (flags & ~host_alloc_flags) != 0) { return cudaErrorInvalidValue; }
    *ptr = nullptr;
    if (size == 0) { return cudaSuccess; }
    return to_cuda_error(operations::allocate_host(device, size, flags, ptr));
  });
}

}  // namespace

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size)
{
  return host_alloc(ptr, size, cudaHostAllocDefault);
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaHostAlloc(void** pHost, size_t size, unsigned int flags)
{
  return host_alloc(pHost, size, flags);
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFreeHost(void* ptr)
{
  return run_api(gated_call, [&] {
    context_device();
    if (ptr == nullptr) { return cudaSuccess; }
    return to_cuda_error(operations::release_host(ptr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    if (pDevice == nullptr || flags != 0) { return cudaErrorInvalidValue; }
    return to_cuda_error(operations::host_device_pointer(pHost, pDevice));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaHostGetFlags(unsigned int* pFlags, void* pHost)
{
  return run_api(gated_call, [&] {
    context_device();
    if (pFlags == nullptr) { return cudaErrorInvalidValue; }
    return to_cuda_error(operations::host_flags(pHost, pFlags));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height)
{
  return run_api(gated_call, [&] {
    int const device = context_device();
    if (devPtr == nullptr || pitch == nullptr) { return cudaErrorInvalidValue; }
    *devPtr = nullptr;
    if (width == 0 || height == 0) {  // nothing allocated
      *pitch = 0;
      return cudaSuccess;
    }
    return to_cuda_error(operations::allocate_pitched(device, width, height, allocation_kind::runtime, devPtr, pitch));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent)
{
  return run_api(gated_call, [&] {
    int const device = context_device();
    if (pitchedDevPtr == nullptr) { return cudaErrorInvalidValue; }
    if (extent.width == 0 || extent.height == 0 || extent.depth == 0) {  // nothing allocated
      *pitchedDevPtr = cudaPitchedPtr{nullptr, 0, extent.width, extent.height};
      return cudaSuccess;
    }
    if (extent.height > std::numeric_limits<std::size_t>::max() / extent.depth) { return cudaErrorMemoryAllocation; }
    void* p = nullptr;
    std::size_t pitch = 0;
    operation_outcome const o = operations::allocate_pitched(device, extent.width, extent.height * extent.depth,
                                                             allocation_kind::runtime, &p, &pitch);
    if (o != operation_outcome::ok) {
      pitchedDevPtr->pitch = pitch;  // as the real runtime leaves it when out of memory
      return to_cuda_error(o);
    }
    *pitchedDevPtr = cudaPitchedPtr{p, pitch, extent.width, extent.height};
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFree(void* devPtr)
{
  return run_api(gated_call, [&] {
    context_device();  // cudaFree(nullptr) is the customary way to initialize the runtime
    if (devPtr == nullptr) { return cudaSuccess; }
    return to_cuda_error(operations::release(devPtr, allocation_kind::runtime));
  });
}

// ---------------------------------------------------------------- memcpy / memset

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind)
{
  return run_api(gated_call, [&] {
    context_device();
    switch (kind) {
      case cudaMemcpyHostToHost:
      case cudaMemcpyHostToDevice:
      case cudaMemcpyDeviceToHost:
      case cudaMemcpyDeviceToDevice:
      case cudaMemcpyDefault: break;
      default: return cudaErrorInvalidMemcpyDirection;
    }
    return to_cuda_error(operations::copy(dst, src, count, operations::copy_direction::unchecked));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count)
{
  return run_api(gated_call, [&] {
    context_device();
    // memset's conversion: only the low byte of value is written.
    return to_cuda_error(operations::fill(devPtr, static_cast<unsigned char>(value), count));
  });
}

// Work on the stream, through the driver's entry points (as the real
// runtime's reach the driver).
CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                                      cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    if (static_cast<unsigned>(kind) > static_cast<unsigned>(cudaMemcpyDefault)) {
      return cudaErrorInvalidMemcpyDirection;
    }
    return call(&driver_entry_points::memcpy_async, reinterpret_cast<CUdeviceptr>(dst),
                reinterpret_cast<CUdeviceptr>(src), count, stream);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::memset_d8_async, reinterpret_cast<CUdeviceptr>(devPtr),
                static_cast<unsigned char>(value), count, stream);
  });
}

// ---------------------------------------------------------------- pointer attributes

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                                               const void* ptr)
{
  return run_api(gated_call, [&] {
    context_device();
    if (attributes == nullptr) { return cudaErrorInvalidValue; }
    model_state& m = model();
    mutex_lock lock(m.mu);
    auto const [base, a] = m.allocation_containing(ptr);
    *attributes = cudaPointerAttributes{};
    if (a == nullptr) {
      // What CUDA 11 and later answer for memory they do not know.
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = cudaInvalidDeviceId;
      attributes->hostPointer = const_cast<void*>(ptr);
      return cudaSuccess;
    }
    // Device memory but for pinned host memory; `device` is the one where it
    // lives (imported memory: the exporter's; host memory: where it was made),
    // not the caller's.
    bool const host = a->kind == allocation_kind::host || (a->pool != nullptr && a->pool->on_host);
    attributes->type = host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    attributes->device = a->device >= 0 ? a->device : cudaInvalidDeviceId;
    attributes->devicePointer = const_cast<void*>(ptr);
    if (host) { attributes->hostPointer = const_cast<void*>(ptr); }
    return cudaSuccess;
  });
}

// ---------------------------------------------------------------- streams (through the driver)
//
// Each makes the runtime device's primary context current first (so the
// special streams stand for its device), then calls the driver.

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_create, pStream, flags);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream)
{
  // Not through cudaStreamCreateWithFlags: a failure must be recorded once.
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_create, pStream, unsigned{CU_STREAM_DEFAULT});
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                                                   int priority)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_create_with_priority, pStream, flags, priority);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_destroy, stream);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData)
{
  return run_api(gated_call, [&] {
    context_device();
    if (config().runtime_private_submissions) {  // the driver's internals, as through cuGetExportTable
      return to_cuda_error(operations::launch(stream, nullptr, false));
    }
    return call(&driver_entry_points::launch_host_func, stream, fn, userData);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                           unsigned long long flags)
{
  return run_api(gated_call, [&] { return call(&driver_entry_points::graph_instantiate, pGraphExec, graph, flags); });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::graph_launch, graphExec, stream);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
  return run_api(gated_call, [&] { return call(&driver_entry_points::graph_exec_destroy, graphExec); });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_get_flags, hStream, flags);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_synchronize, stream);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_query, stream);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_wait_event, stream, event, flags);
  });
}

// ---------------------------------------------------------------- events (through the driver)

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::event_create, event, unsigned{CU_EVENT_DEFAULT});
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::event_create, event, flags);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::event_destroy, event);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::event_record, event, stream);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::event_query, event);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::event_synchronize, event);
  });
}

// ---------------------------------------------------------------- stream capture, graphs (through the driver)

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_begin_capture, stream, static_cast<CUstreamCaptureMode>(mode));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::stream_end_capture, stream, pGraph);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                                            enum cudaStreamCaptureStatus* pCaptureStatus)
{
  return run_api(gated_call, [&] {
    context_device();
    // The two enumerations have the same values (and the same size).
    return call(&driver_entry_points::stream_is_capturing, stream,
                reinterpret_cast<CUstreamCaptureStatus*>(pCaptureStatus));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::thread_exchange_stream_capture_mode,
                reinterpret_cast<CUstreamCaptureMode*>(mode));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::graph_destroy, graph);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::graph_get_nodes, graph, nodes, numNodes);
  });
}

// ---------------------------------------------------------------- pools

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device)
{
  return run_api(gated_call, [&] {
    context_device();
    if (operation_outcome o = operations::pools_supported(); o != operation_outcome::ok) { return to_cuda_error(o); }
    if (memPool == nullptr) { return cudaErrorInvalidValue; }
    model_state& m = model();
    if (!m.valid_device(device)) { return cudaErrorInvalidDevice; }
    mutex_lock lock(m.mu);
    *memPool = reinterpret_cast<cudaMemPool_t>(m.device(device).default_pool);
    return cudaSuccess;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* memPool,
                                                        const struct cudaMemPoolProps* poolProps)
{
  return run_api(gated_call, [&] {
    context_device();
    if (poolProps == nullptr) { return to_cuda_error(operations::create_pool(nullptr, memPool)); }
    auto const properties = operations::pool_properties(*poolProps, cudaMemAllocationTypePinned,
                                                        cudaMemLocationTypeDevice, cudaMemLocationTypeHost);
    return to_cuda_error(operations::create_pool(&properties, memPool));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::destroy_pool(memPool));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                              void* value)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::set_pool_attribute(memPool, attr, value));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::trim_pool(memPool, minBytesToKeep));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                              void* value)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::get_pool_attribute(memPool, attr, value));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                                           const struct cudaMemAccessDesc* descList, size_t count)
{
  return run_api(gated_call, [&] {
    context_device();
    // The two descriptor types have the same layout and values (checked above).
    return call(&driver_entry_points::mem_pool_set_access, memPool, reinterpret_cast<CUmemAccessDesc const*>(descList),
                count);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags* flags, cudaMemPool_t memPool,
                                                           struct cudaMemLocation* location)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::mem_pool_get_access, reinterpret_cast<CUmemAccess_flags*>(flags), memPool,
                reinterpret_cast<CUmemLocation*>(location));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolExportToShareableHandle(void* shareableHandle, cudaMemPool_t memPool,
                                                                         enum cudaMemAllocationHandleType handleType,
                                                                         unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::mem_pool_export_to_shareable_handle, shareableHandle, memPool,
                static_cast<CUmemAllocationHandleType>(handleType), static_cast<unsigned long long>(flags));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData* exportData, void* ptr)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::mem_pool_export_pointer, reinterpret_cast<CUmemPoolPtrExportData*>(exportData),
                as_deviceptr(ptr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolImportFromShareableHandle(cudaMemPool_t* memPool,
                                                                           void* shareableHandle,
                                                                           enum cudaMemAllocationHandleType handleType,
                                                                           unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::mem_pool_import_from_shareable_handle, memPool, shareableHandle,
                static_cast<CUmemAllocationHandleType>(handleType), static_cast<unsigned long long>(flags));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMemPoolImportPointer(void** ptr, cudaMemPool_t memPool,
                                                               struct cudaMemPoolPtrExportData* exportData)
{
  return run_api(gated_call, [&] {
    context_device();
    if (ptr == nullptr) { return cudaErrorInvalidValue; }
    CUdeviceptr p = 0;
    cudaError_t const e = call(&driver_entry_points::mem_pool_import_pointer, &p, memPool,
                               reinterpret_cast<CUmemPoolPtrExportData*>(exportData));
    if (e == cudaSuccess) { *ptr = as_pointer(p); }
    return e;
  });
}

// ---------------------------------------------------------------- legacy IPC (through the driver)

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::ipc_get_mem_handle, reinterpret_cast<CUipcMemHandle*>(handle),
                as_deviceptr(devPtr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();
    if (devPtr == nullptr) { return cudaErrorInvalidValue; }
    CUipcMemHandle h{};  // the same 64 bytes (checked above)
    std::memcpy(&h, &handle, sizeof h);
    CUdeviceptr p = 0;
    cudaError_t const e = call(&driver_entry_points::ipc_open_mem_handle, &p, h, flags);
    if (e == cudaSuccess) { *devPtr = as_pointer(p); }
    return e;
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void* devPtr)
{
  return run_api(gated_call, [&] {
    context_device();
    return call(&driver_entry_points::ipc_close_mem_handle, as_deviceptr(devPtr));
  });
}

// ---------------------------------------------------------------- peer access (through the driver)

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice)
{
  return run_api(gated_call, [&] {
    // A device query: makes no context current (like cudaDeviceGetAttribute).
    return call(&driver_entry_points::device_can_access_peer, canAccessPeer, CUdevice{device}, CUdevice{peerDevice});
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
  return run_api(gated_call, [&] {
    context_device();  // from the current device's context ...
    if (!model().valid_device(peerDevice)) { return cudaErrorInvalidDevice; }
    CUcontext peer = nullptr;  // ... to the peer device's primary context
    if (cudaError_t const e = held_primary_context(peerDevice, peer)) { return e; }
    return call(&driver_entry_points::ctx_enable_peer_access, peer, flags);
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice)
{
  return run_api(gated_call, [&] {
    context_device();
    if (!model().valid_device(peerDevice)) { return cudaErrorInvalidDevice; }
    CUcontext peer = nullptr;
    if (cudaError_t const e = held_primary_context(peerDevice, peer)) { return e; }
    return call(&driver_entry_points::ctx_disable_peer_access, peer);
  });
}

// ---------------------------------------------------------------- stream-ordered allocation

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                                              cudaStream_t stream)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::allocate_from_pool_async(memPool, size, stream, ptr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::allocate_async(size, hStream, devPtr));
  });
}

CUDA_DOUBLE_API cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t hStream)
{
  return run_api(gated_call, [&] {
    context_device();
    return to_cuda_error(operations::free_async(devPtr, hStream, /*from_driver=*/false));
  });
}

}  // extern "C"
