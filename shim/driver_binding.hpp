// Finding the CUDA driver (libcuda.so.1) the process uses, and the real
// functions the shim needs from it: the driver entry points it replaces (to
// pass calls through), and the pool API for its driver backend.
//
// libcuda.so.1 is located on the first call that needs it, among the loaded
// objects (linked with -lcuda, or dlopen()ed by a runtime). Never loaded by
// the shim itself.
#pragma once

#include <cuda.h>

namespace asyncshim::shim {

// cuGetProcAddress before CUDA 12 (the v1 ABI, still exported as "cuGetProcAddress").
using get_proc_address_v1_fn = CUresult (*)(char const*, void**, int, cuuint64_t);

struct driver_functions {
  get_proc_address_v1_fn get_proc_address_v1 = nullptr;
  decltype(&::cuGetProcAddress_v2) get_proc_address_v2 = nullptr;
  decltype(&::cuMemAlloc_v2) mem_alloc = nullptr;
  decltype(&::cuMemFree_v2) mem_free = nullptr;
  decltype(&::cuCtxGetDevice) ctx_get_device = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) device_primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease_v2) device_primary_ctx_release = nullptr;
  decltype(&::cuCtxPushCurrent_v2) ctx_push_current = nullptr;
  decltype(&::cuCtxPopCurrent_v2) ctx_pop_current = nullptr;
  decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetInfo_v2) mem_get_info = nullptr;
  decltype(&::cuMemPoolCreate) mem_pool_create = nullptr;
  decltype(&::cuMemPoolDestroy) mem_pool_destroy = nullptr;
  decltype(&::cuMemPoolSetAttribute) mem_pool_set_attribute = nullptr;
  decltype(&::cuMemPoolGetAttribute) mem_pool_get_attribute = nullptr;
  decltype(&::cuMemPoolTrimTo) mem_pool_trim_to = nullptr;
  decltype(&::cuMemAllocFromPoolAsync) mem_alloc_from_pool_async = nullptr;
  decltype(&::cuMemFreeAsync) mem_free_async = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventDestroy_v2) event_destroy = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventQuery) event_query = nullptr;
  decltype(&::cuStreamWaitEvent) stream_wait_event = nullptr;
  decltype(&::cuThreadExchangeStreamCaptureMode) thread_exchange_stream_capture_mode = nullptr;

  // What the shim follows (followed_driver_calls.cpp): the real functions behind its
  // replacements, and their per-thread-default-stream (_ptsz) variants.
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamCreateWithPriority) stream_create_with_priority = nullptr;
  decltype(&::cuStreamDestroy_v2) stream_destroy = nullptr;
  decltype(&::cuStreamBeginCapture_v2) stream_begin_capture = nullptr;
  decltype(&::cuStreamBeginCapture_v2) stream_begin_capture_ptsz = nullptr;
  decltype(&::cuStreamBeginCaptureToGraph) stream_begin_capture_to_graph = nullptr;
  decltype(&::cuStreamBeginCaptureToGraph) stream_begin_capture_to_graph_ptsz = nullptr;
  decltype(&::cuStreamEndCapture) stream_end_capture = nullptr;
  decltype(&::cuStreamEndCapture) stream_end_capture_ptsz = nullptr;
  decltype(&::cuStreamIsCapturing) stream_is_capturing = nullptr;
  decltype(&::cuStreamIsCapturing) stream_is_capturing_ptsz = nullptr;
  decltype(&::cuDevicePrimaryCtxReset_v2) device_primary_ctx_reset = nullptr;
  decltype(&::cuDevicePrimaryCtxGetState) device_primary_ctx_get_state = nullptr;
  decltype(&::cuCtxDestroy_v2) ctx_destroy = nullptr;
  decltype(&::cuCtxEnablePeerAccess) ctx_enable_peer_access = nullptr;
  decltype(&::cuCtxDisablePeerAccess) ctx_disable_peer_access = nullptr;
  decltype(&::cuIpcGetMemHandle) ipc_get_mem_handle = nullptr;
  decltype(&::cuMemPoolSetAccess) mem_pool_set_access = nullptr;
  decltype(&::cuMemPoolExportToShareableHandle) mem_pool_export_to_shareable_handle = nullptr;

  [[nodiscard]] bool found() const noexcept { return mem_alloc != nullptr && mem_free != nullptr; }
};

// The process's driver; every pointer is null while none is loaded (looked
// for again on the next call).
[[nodiscard]] driver_functions const& driver() noexcept;

}  // namespace asyncshim::shim
