// The driver calls the shim follows without changing what they do: stream
// creation and destruction, stream capture, context synchronization and
// destruction, primary context reset, peer access, and pool export and
// legacy IPC (for hints). Each runs the real driver function and tells the tracker
// (stream_tracker.hpp), the queued frees, the pools (reset, context
// destruction, peer access) or the hints what happened. The
// runtime reaches them through cuGetProcAddress (driver_interception.cpp
// hands out the asyncshim_hook_* functions); programs linked with -lcuda
// through the exported names below. Nothing here throws.
#include "context_teardown.hpp"
#include "driver_binding.hpp"
#include "driver_interception.hpp"
#include "export_hints.hpp"
#include "peer_access_changes.hpp"
#include "queued_frees.hpp"
#include "stream_tracker.hpp"

#define ASYNCSHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using asyncshim::shim::driver;
using asyncshim::shim::tracker;
using asyncshim::shim::tracking_active;

template <class Fn, class... Args>
CUresult call_real(Fn real, Args... args) noexcept
{
  return real != nullptr ? real(args...) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult stream_created(CUresult result, CUstream const* stream, unsigned flags) noexcept
{
  if (result == CUDA_SUCCESS && stream != nullptr && tracking_active()) { tracker().stream_created(*stream, flags); }
  return result;
}

template <class Begin>
CUresult begin_capture(CUstream stream, bool per_thread_api, CUstreamCaptureMode mode, Begin real_begin) noexcept
{
  if (!tracking_active()) { return real_begin(); }
  return tracker().begin_capture(stream, per_thread_api, mode, real_begin);
}

CUresult end_capture(decltype(driver().stream_end_capture) real_end,
                     decltype(driver().stream_is_capturing) real_is_capturing, bool per_thread_api, CUstream stream,
                     CUgraph* graph) noexcept
{
  CUresult const result = call_real(real_end, stream, graph);
  if (!tracking_active()) { return result; }
  // Whether the call ended the capture (a wrong-thread end does not):
  // the driver says.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  bool const still = real_is_capturing != nullptr && real_is_capturing(stream, &status) == CUDA_SUCCESS &&
                     status != CU_STREAM_CAPTURE_STATUS_NONE;
  tracker().capture_maybe_ended(stream, per_thread_api, still);
  if (!tracker().captures_in_progress()) { asyncshim::shim::issue_urgent_frees(); }
  return result;
}

}  // namespace

extern "C" {

CUresult asyncshim_hook_stream_create(CUstream* stream, unsigned flags)
{
  return stream_created(call_real(driver().stream_create, stream, flags), stream, flags);
}

CUresult asyncshim_hook_stream_create_with_priority(CUstream* stream, unsigned flags, int priority)
{
  return stream_created(call_real(driver().stream_create_with_priority, stream, flags, priority), stream, flags);
}

CUresult asyncshim_hook_stream_destroy(CUstream stream)
{
  auto const real = [&] { return call_real(driver().stream_destroy, stream); };
  return tracking_active() ? tracker().destroy_stream(stream, real) : real();
}

CUresult asyncshim_hook_stream_begin_capture(CUstream stream, CUstreamCaptureMode mode)
{
  return begin_capture(stream, false, mode, [&] { return call_real(driver().stream_begin_capture, stream, mode); });
}

CUresult asyncshim_hook_stream_begin_capture_ptsz(CUstream stream, CUstreamCaptureMode mode)
{
  return begin_capture(stream, true, mode, [&] { return call_real(driver().stream_begin_capture_ptsz, stream, mode); });
}

CUresult asyncshim_hook_stream_begin_capture_to_graph(CUstream stream, CUgraph graph, CUgraphNode const* dependencies,
                                                      CUgraphEdgeData const* edges, size_t count,
                                                      CUstreamCaptureMode mode)
{
  return begin_capture(stream, false, mode, [&] {
    return call_real(driver().stream_begin_capture_to_graph, stream, graph, dependencies, edges, count, mode);
  });
}

CUresult asyncshim_hook_stream_begin_capture_to_graph_ptsz(CUstream stream, CUgraph graph,
                                                           CUgraphNode const* dependencies, CUgraphEdgeData const* edges,
                                                           size_t count, CUstreamCaptureMode mode)
{
  return begin_capture(stream, true, mode, [&] {
    return call_real(driver().stream_begin_capture_to_graph_ptsz, stream, graph, dependencies, edges, count, mode);
  });
}

CUresult asyncshim_hook_stream_end_capture(CUstream stream, CUgraph* graph)
{
  return end_capture(driver().stream_end_capture, driver().stream_is_capturing, false, stream, graph);
}

CUresult asyncshim_hook_stream_end_capture_ptsz(CUstream stream, CUgraph* graph)
{
  return end_capture(driver().stream_end_capture_ptsz, driver().stream_is_capturing_ptsz, true, stream, graph);
}

CUresult asyncshim_hook_ctx_destroy(CUcontext context)
{
  if (tracking_active()) { asyncshim::shim::context_destroying(context); }
  return call_real(driver().ctx_destroy, context);
}

CUresult asyncshim_hook_ctx_synchronize()
{
  CUresult const result = call_real(driver().ctx_synchronize);
  // Everything submitted before has completed: the frees queued under
  // device ordering go to the pool now, so that after a synchronization
  // every block freed before it can be handed out again.
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::issue_all_queued_frees(); }
  return result;
}

CUresult asyncshim_hook_ctx_enable_peer_access(CUcontext peer, unsigned flags)
{
  CUresult const result = call_real(driver().ctx_enable_peer_access, peer, flags);
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::peer_access_changed(peer, true); }
  return result;
}

CUresult asyncshim_hook_ctx_disable_peer_access(CUcontext peer)
{
  CUresult const result = call_real(driver().ctx_disable_peer_access, peer);
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::peer_access_changed(peer, false); }
  return result;
}

CUresult asyncshim_hook_ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr ptr)
{
  CUresult const result = call_real(driver().ipc_get_mem_handle, handle, ptr);
  if (result != CUDA_SUCCESS && tracking_active()) { asyncshim::shim::ipc_handle_failed(ptr, result); }
  return result;
}

CUresult asyncshim_hook_mem_pool_export_to_shareable_handle(void* handle, CUmemoryPool pool,
                                                            CUmemAllocationHandleType type, unsigned long long flags)
{
  CUresult const result = call_real(driver().mem_pool_export_to_shareable_handle, handle, pool, type, flags);
  if (result != CUDA_SUCCESS && tracking_active()) { asyncshim::shim::pool_export_failed(type, result); }
  return result;
}

CUresult asyncshim_hook_device_primary_ctx_reset(CUdevice device)
{
  if (tracking_active()) { asyncshim::shim::device_resetting(device); }
  return call_real(driver().device_primary_ctx_reset, device);
}

}  // extern "C"

// The same under the driver's exported names, for programs linked with -lcuda.
ASYNCSHIM_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags)
{
  return asyncshim_hook_stream_create(phStream, Flags);
}

ASYNCSHIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority)
{
  return asyncshim_hook_stream_create_with_priority(phStream, flags, priority);
}

ASYNCSHIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) { return asyncshim_hook_stream_destroy(hStream); }

ASYNCSHIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
  return asyncshim_hook_stream_begin_capture(hStream, mode);
}

ASYNCSHIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
  return asyncshim_hook_stream_begin_capture_ptsz(hStream, mode);
}

ASYNCSHIM_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                      CUgraphNode const* dependencies,
                                                      CUgraphEdgeData const* dependencyData, size_t numDependencies,
                                                      CUstreamCaptureMode mode)
{
  return asyncshim_hook_stream_begin_capture_to_graph(hStream, hGraph, dependencies, dependencyData, numDependencies,
                                                      mode);
}

ASYNCSHIM_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                           CUgraphNode const* dependencies,
                                                           CUgraphEdgeData const* dependencyData,
                                                           size_t numDependencies, CUstreamCaptureMode mode)
{
  return asyncshim_hook_stream_begin_capture_to_graph_ptsz(hStream, hGraph, dependencies, dependencyData,
                                                           numDependencies, mode);
}

ASYNCSHIM_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph)
{
  return asyncshim_hook_stream_end_capture(hStream, phGraph);
}

ASYNCSHIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph)
{
  return asyncshim_hook_stream_end_capture_ptsz(hStream, phGraph);
}

ASYNCSHIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return asyncshim_hook_ctx_destroy(ctx); }

ASYNCSHIM_EXPORT CUresult cuCtxSynchronize() { return asyncshim_hook_ctx_synchronize(); }

ASYNCSHIM_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
  return asyncshim_hook_ctx_enable_peer_access(peerContext, Flags);
}

ASYNCSHIM_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
  return asyncshim_hook_ctx_disable_peer_access(peerContext);
}

ASYNCSHIM_EXPORT CUresult cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                           CUmemAllocationHandleType handleType,
                                                           unsigned long long flags)
{
  return asyncshim_hook_mem_pool_export_to_shareable_handle(handle_out, pool, handleType, flags);
}

ASYNCSHIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr)
{
  return asyncshim_hook_ipc_get_mem_handle(pHandle, dptr);
}

ASYNCSHIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return asyncshim_hook_device_primary_ctx_reset(dev); }
