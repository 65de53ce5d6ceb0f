#include "driver_binding.hpp"

#include "bound_once.hpp"
#include "loaded_library.hpp"

#include <cstring>

namespace asyncshim::shim {
namespace {

bool is_libcuda(char const* path)
{
  char const* base = std::strrchr(path, '/');
  return std::strcmp(base != nullptr ? base + 1 : path, "libcuda.so.1") == 0;
}

driver_functions bind()
{
  driver_functions f;
  // libcuda.so.1 itself, never another library's definition of its functions
  // (a second interposer's cuGetProcAddress would otherwise be taken for the
  // driver's).
  void* library = loaded_library(is_libcuda);
  if (library == nullptr) { return f; }
  take_function(library, "cuGetProcAddress", f.get_proc_address_v1);
  take_function(library, "cuGetProcAddress_v2", f.get_proc_address_v2);
  take_function(library, "cuMemAlloc_v2", f.mem_alloc);
  take_function(library, "cuMemFree_v2", f.mem_free);
  take_function(library, "cuCtxGetDevice", f.ctx_get_device);
  take_function(library, "cuDevicePrimaryCtxRetain", f.device_primary_ctx_retain);
  take_function(library, "cuDevicePrimaryCtxRelease_v2", f.device_primary_ctx_release);
  take_function(library, "cuCtxPushCurrent_v2", f.ctx_push_current);
  take_function(library, "cuCtxPopCurrent_v2", f.ctx_pop_current);
  take_function(library, "cuDriverGetVersion", f.driver_get_version);
  take_function(library, "cuDeviceGetAttribute", f.device_get_attribute);
  take_function(library, "cuMemGetInfo_v2", f.mem_get_info);
  take_function(library, "cuMemPoolCreate", f.mem_pool_create);
  take_function(library, "cuMemPoolDestroy", f.mem_pool_destroy);
  take_function(library, "cuMemPoolSetAttribute", f.mem_pool_set_attribute);
  take_function(library, "cuMemPoolGetAttribute", f.mem_pool_get_attribute);
  take_function(library, "cuMemPoolTrimTo", f.mem_pool_trim_to);
  take_function(library, "cuMemAllocFromPoolAsync", f.mem_alloc_from_pool_async);
  take_function(library, "cuMemFreeAsync", f.mem_free_async);
  take_function(library, "cuGetErrorName", f.get_error_name);
  take_function(library, "cuGetErrorString", f.get_error_string);
  take_function(library, "cuCtxGetCurrent", f.ctx_get_current);
  take_function(library, "cuCtxSynchronize", f.ctx_synchronize);
  take_function(library, "cuStreamSynchronize", f.stream_synchronize);
  take_function(library, "cuEventCreate", f.event_create);
  take_function(library, "cuEventDestroy_v2", f.event_destroy);
  take_function(library, "cuEventRecord", f.event_record);
  take_function(library, "cuEventQuery", f.event_query);
  take_function(library, "cuStreamWaitEvent", f.stream_wait_event);
  take_function(library, "cuThreadExchangeStreamCaptureMode", f.thread_exchange_stream_capture_mode);
  take_function(library, "cuStreamCreate", f.stream_create);
  take_function(library, "cuStreamCreateWithPriority", f.stream_create_with_priority);
  take_function(library, "cuStreamDestroy_v2", f.stream_destroy);
  take_function(library, "cuStreamBeginCapture_v2", f.stream_begin_capture);
  take_function(library, "cuStreamBeginCapture_v2_ptsz", f.stream_begin_capture_ptsz);
  take_function(library, "cuStreamBeginCaptureToGraph", f.stream_begin_capture_to_graph);
  take_function(library, "cuStreamBeginCaptureToGraph_ptsz", f.stream_begin_capture_to_graph_ptsz);
  take_function(library, "cuStreamEndCapture", f.stream_end_capture);
  take_function(library, "cuStreamEndCapture_ptsz", f.stream_end_capture_ptsz);
  take_function(library, "cuStreamIsCapturing", f.stream_is_capturing);
  take_function(library, "cuStreamIsCapturing_ptsz", f.stream_is_capturing_ptsz);
  take_function(library, "cuDevicePrimaryCtxReset_v2", f.device_primary_ctx_reset);
  take_function(library, "cuDevicePrimaryCtxGetState", f.device_primary_ctx_get_state);
  take_function(library, "cuCtxDestroy_v2", f.ctx_destroy);
  take_function(library, "cuCtxEnablePeerAccess", f.ctx_enable_peer_access);
  take_function(library, "cuCtxDisablePeerAccess", f.ctx_disable_peer_access);
  take_function(library, "cuIpcGetMemHandle", f.ipc_get_mem_handle);
  take_function(library, "cuMemPoolSetAccess", f.mem_pool_set_access);
  take_function(library, "cuMemPoolExportToShareableHandle", f.mem_pool_export_to_shareable_handle);
  return f;
}

}  // namespace

driver_functions const& driver() noexcept
{
  struct tag {};
  return bound_once<tag, driver_functions>(bind);
}

}  // namespace asyncshim::shim
