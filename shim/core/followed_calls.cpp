// The driver calls the shim follows without changing what they do: stream
// creation and destruction, stream capture, context synchronization and
// destruction, primary context reset, peer access, and pool export (for a
// hint; legacy IPC is core/ipc_export.cpp's). Each runs the real driver function and tells the
// stream tracker, the queued frees or the pools what happened:
//  - a context that goes (cudaDeviceReset, cuDevicePrimaryCtxReset,
//    cuCtxDestroy) natively frees every allocation made in it, so the
//    device's pool goes too;
//  - peer access the program enables or disables is applied to the pools:
//    natively cudaMalloc memory follows cuCtxEnablePeerAccess, pool memory
//    only cudaMemPoolSetAccess (docs/design.md, "Several GPUs and several processes");
//  - a failed pool export gets a clear message.
// Nothing here throws.
#include "core/deferred_frees.hpp"
#include "core/hooks.hpp"
#include "core/lookup_redirect.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/peer_access.hpp"
#include "state/shim_state.hpp"
#include "state/stream_tracker.hpp"
#include "support/log.hpp"

#include <atomic>

namespace asyncshim::shim {
namespace {

// Frees the pool's blocks, then the pool goes (retire).
void release_device_pool(shim_state& s, int device) noexcept
{
  if (s.pools.existing(device) == nullptr) { return; }
  // No allocation or issue of queued frees is in the middle of using this
  // pool meanwhile (they hold the access shared).
  auto exclusive = tracker().exclusive_access();
  if (s.pools.existing(device) == nullptr) { return; }
  auto const& drv = driver();
  device_streams const streams = s.pools.streams(device);
  std::size_t live = 0;
  // The cached blocks first: their records are taken as they go back.
  return_cached_to_pool_at_reset(s, device);
  {
    context_scope in_context{streams.context};
    // Every block of the pool the shim handed out: the program's, and the
    // freed ones still queued (their queue entries are dropped below) or
    // cached, should they not have gone back above.
    for (auto const& [ptr, record] : s.registry.take_device(device)) {
      if (drv.mem_free_async != nullptr) { (void)drv.mem_free_async(reinterpret_cast<CUdeviceptr>(ptr), streams.own); }
      if (record.freed) { continue; }
      // The program's block, freed with the context: so the event log and the
      // leak report say (the next pool may hand its address out again).
      if (s.events != nullptr) { log_event(*s.events, event_action::free, ptr, record.bytes, 0); }
      if (s.leaks != nullptr) { (void)s.leaks->take(ptr); }
      if (s.stats != nullptr) { s.stats->free_served(device, record.bytes); }
      ++live;
    }
  }
  s.pending.drop(device);
  forget_issued_at_reset(s, device);
  s.exports.forget_device(device);
  s.pools.retire(device);
  if (live > 0) { log::info("device {}: {} live allocations from the pool went with its context", device, live); }
}

void device_resetting(int device) noexcept
{
  peer_access().forget(device);
  auto const& drv = driver();
  // The program's streams and events in the device's primary context go
  // with it.
  unsigned flags = 0;
  int active = 0;
  CUcontext primary = nullptr;
  if (drv.device_primary_ctx_get_state != nullptr &&
      drv.device_primary_ctx_get_state(device, &flags, &active) == CUDA_SUCCESS && active != 0 &&
      drv.device_primary_ctx_retain(&primary, device) == CUDA_SUCCESS) {
    (void)drv.device_primary_ctx_release(device);
    tracker().context_destroying(primary);
  }
  if (shim_state* s = existing_state()) {
    release_device_pool(*s, device);
    s->limits.forget_native(device);
  }
}

void context_destroying(CUcontext context) noexcept
{
  tracker().context_destroying(context);
  shim_state* s = existing_state();
  if (s == nullptr) { return; }
  // The context a device's pool and the shim's stream there were made in.
  for (int device = 0; device < max_devices; ++device) {
    if (s->pools.existing(device) != nullptr && s->pools.streams(device).context == context) {
      release_device_pool(*s, device);
    }
  }
}

void peer_access_changed(CUcontext peer, bool enabled) noexcept
{
  auto const& drv = driver();
  int accessor = -1;
  int owner = -1;
  if (drv.ctx_get_device(&accessor) != CUDA_SUCCESS) { return; }
  {
    context_scope in_peer{peer};
    if (!in_peer.current() || drv.ctx_get_device(&owner) != CUDA_SUCCESS) { return; }
  }
  if (owner == accessor) { return; }
  if (enabled) {
    peer_access().grant(accessor, owner);
  } else {
    peer_access().revoke(accessor, owner);
  }
  shim_state* s = existing_state();
  cuda_async_memory_resource* pool = s != nullptr ? s->pools.existing(owner) : nullptr;
  if (pool == nullptr) { return; }  // applied when the pool is made
  auto const handle = reinterpret_cast<CUmemoryPool>(pool->pool_handle());
  if (CUresult const r = set_pool_access(handle, accessor, enabled); r != CUDA_SUCCESS) {
    log::warn("cannot {} device {}'s access to the pool of device {} ({}) as peer access was {}",
              enabled ? "grant" : "revoke", accessor, owner, cuda_status{r}, enabled ? "enabled" : "disabled");
  } else {
    log::debug("device {} {} access to the pool of device {} (peer access {})", accessor,
               enabled ? "has" : "no longer has", owner, enabled ? "enabled" : "disabled");
  }
}

void pool_export_failed(CUmemAllocationHandleType type, CUresult result) noexcept
{
  // Fabric handles need a system set up for them (IMEX): a fabric pool can be
  // made without, but exporting it fails. Said once. (Not tried by the shim
  // itself when it makes the pool: on the H200, exporting a fabric pool a
  // second time after a refused export crashed inside the driver.)
  if (type != CU_MEM_HANDLE_TYPE_FABRIC || process_settings().export_handle_type != config::handle_type::fabric) {
    return;
  }
  static std::atomic<bool> said{false};
  if (said.exchange(true)) { return; }
  log::warn("ASYNCSHIM_EXPORT_HANDLE_TYPE=fabric: exporting the pool failed with {}: this system is not set up for "
            "fabric handles (IMEX); processes on one node can share the pool with posix_file_descriptor",
            cuda_status{result});
}

}  // namespace
}  // namespace asyncshim::shim

namespace {

using asyncshim::shim::call_real;
using asyncshim::shim::driver;
using asyncshim::shim::tracker;
using asyncshim::shim::tracking_active;

CUresult stream_created(CUresult result, CUstream const* stream, unsigned flags) noexcept
{
  if (result == CUDA_SUCCESS && stream != nullptr && tracking_active()) { tracker().stream_created(*stream, flags); }
  return result;
}

// A context of the program's own: frees are not made in order any more
// (state/stream_tracker.hpp), once the new context is there; a green
// context has no legacy stream, and its streams are followed from their
// first work.
CUresult context_created(CUresult result) noexcept
{
  if (result == CUDA_SUCCESS && tracking_active()) { tracker().end_in_order_frees("the program made a context"); }
  return result;
}

// A context with streams of its own that no fence reaches: fences wait for it.
CUresult context_created(CUresult result, CUcontext const* context, CUdevice device) noexcept
{
  if (result == CUDA_SUCCESS && context != nullptr && tracking_active()) {
    tracker().context_made(*context, static_cast<int>(device));
  }
  return context_created(result);
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

CUresult asyncshim_hook_stream_create(CUstream* stream, unsigned flags) noexcept
{
  return stream_created(call_real(driver().stream_create, stream, flags), stream, flags);
}

CUresult asyncshim_hook_stream_create_with_priority(CUstream* stream, unsigned flags, int priority) noexcept
{
  return stream_created(call_real(driver().stream_create_with_priority, stream, flags, priority), stream, flags);
}

CUresult asyncshim_hook_stream_destroy(CUstream stream) noexcept
{
  auto const real = [&] { return call_real(driver().stream_destroy, stream); };
  return tracking_active() ? tracker().destroy_stream(stream, real) : real();
}

CUresult asyncshim_hook_stream_begin_capture(CUstream stream, CUstreamCaptureMode mode) noexcept
{
  return begin_capture(stream, false, mode, [&] { return call_real(driver().stream_begin_capture, stream, mode); });
}

CUresult asyncshim_hook_stream_begin_capture_ptsz(CUstream stream, CUstreamCaptureMode mode) noexcept
{
  return begin_capture(stream, true, mode, [&] { return call_real(driver().stream_begin_capture_ptsz, stream, mode); });
}

CUresult asyncshim_hook_stream_begin_capture_to_graph(CUstream stream, CUgraph graph, CUgraphNode const* dependencies,
                                                      CUgraphEdgeData const* edges, size_t count,
                                                      CUstreamCaptureMode mode) noexcept
{
  return begin_capture(stream, false, mode, [&] {
    return call_real(driver().stream_begin_capture_to_graph, stream, graph, dependencies, edges, count, mode);
  });
}

CUresult asyncshim_hook_stream_begin_capture_to_graph_ptsz(CUstream stream, CUgraph graph,
                                                           CUgraphNode const* dependencies,
                                                           CUgraphEdgeData const* edges, size_t count,
                                                           CUstreamCaptureMode mode) noexcept
{
  return begin_capture(stream, true, mode, [&] {
    return call_real(driver().stream_begin_capture_to_graph_ptsz, stream, graph, dependencies, edges, count, mode);
  });
}

CUresult asyncshim_hook_stream_end_capture(CUstream stream, CUgraph* graph) noexcept
{
  return end_capture(driver().stream_end_capture, driver().stream_is_capturing, false, stream, graph);
}

CUresult asyncshim_hook_stream_end_capture_ptsz(CUstream stream, CUgraph* graph) noexcept
{
  return end_capture(driver().stream_end_capture_ptsz, driver().stream_is_capturing_ptsz, true, stream, graph);
}

CUresult asyncshim_hook_ctx_create_v2(CUcontext* context, unsigned flags, CUdevice device) noexcept
{
  return context_created(call_real(driver().ctx_create_v2, context, flags, device), context, device);
}

CUresult asyncshim_hook_ctx_create_v3(CUcontext* context, CUexecAffinityParam* params, int count, unsigned flags,
                                      CUdevice device) noexcept
{
  return context_created(call_real(driver().ctx_create_v3, context, params, count, flags, device), context, device);
}

CUresult asyncshim_hook_ctx_create_v4(CUcontext* context, CUctxCreateParams* params, unsigned flags,
                                      CUdevice device) noexcept
{
  return context_created(call_real(driver().ctx_create_v4, context, params, flags, device), context, device);
}

CUresult asyncshim_hook_green_ctx_create(CUgreenCtx* context, CUdevResourceDesc desc, CUdevice device,
                                         unsigned flags) noexcept
{
  return context_created(call_real(driver().green_ctx_create, context, desc, device, flags));
}

// Memory that something outside the CUDA streams will use: GPUDirect RDMA
// asks for synchronous memory operations on it, a dma-buf handle gives it to
// another device's driver. Neither orders itself after the legacy stream, so
// frees are not made in order again, and those made so far are waited for.
CUresult asyncshim_hook_pointer_set_attribute(void const* value, CUpointer_attribute attribute,
                                              CUdeviceptr pointer) noexcept
{
  // Whatever the driver answers: a program may take a refusal as harmless
  // and register the memory all the same.
  CUresult const result = call_real(driver().pointer_set_attribute, value, attribute, pointer);
  if (attribute == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS && tracking_active()) {
    tracker().end_in_order_frees("the program asked for synchronous memory operations (GPUDirect RDMA)");
  }
  return result;
}

CUresult asyncshim_hook_mem_get_handle_for_address_range(void* handle, CUdeviceptr pointer, size_t size,
                                                         CUmemRangeHandleType type, unsigned long long flags) noexcept
{
  CUresult const result = call_real(driver().mem_get_handle_for_address_range, handle, pointer, size, type, flags);
  if (tracking_active()) { tracker().end_in_order_frees("the program asked for a handle to device memory (dma-buf)"); }
  return result;
}

CUresult asyncshim_hook_ctx_destroy(CUcontext context) noexcept
{
  if (tracking_active()) { asyncshim::shim::context_destroying(context); }
  return call_real(driver().ctx_destroy, context);
}

// Everything submitted before has completed: the frees queued under device
// ordering go to the pool now, so that after a synchronization every block
// freed before it can be handed out again. (Issuing is safe after any
// context's synchronization: each queue is issued behind its fence.)
CUresult asyncshim_hook_ctx_synchronize() noexcept
{
  CUresult const result = call_real(driver().ctx_synchronize);
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::issue_all_queued_frees(); }
  return result;
}

CUresult asyncshim_hook_ctx_synchronize_v2(CUcontext ctx) noexcept
{
  CUresult const result = call_real(driver().ctx_synchronize_v2, ctx);
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::issue_all_queued_frees(); }
  return result;
}

CUresult asyncshim_hook_ctx_enable_peer_access(CUcontext peer, unsigned flags) noexcept
{
  CUresult const result = call_real(driver().ctx_enable_peer_access, peer, flags);
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::peer_access_changed(peer, true); }
  return result;
}

CUresult asyncshim_hook_ctx_disable_peer_access(CUcontext peer) noexcept
{
  CUresult const result = call_real(driver().ctx_disable_peer_access, peer);
  if (result == CUDA_SUCCESS && tracking_active()) { asyncshim::shim::peer_access_changed(peer, false); }
  return result;
}

CUresult asyncshim_hook_mem_pool_export_to_shareable_handle(void* handle, CUmemoryPool pool,
                                                            CUmemAllocationHandleType type,
                                                            unsigned long long flags) noexcept
{
  CUresult const result = call_real(driver().mem_pool_export_to_shareable_handle, handle, pool, type, flags);
  if (result != CUDA_SUCCESS && tracking_active()) { asyncshim::shim::pool_export_failed(type, result); }
  return result;
}

CUresult asyncshim_hook_device_primary_ctx_reset(CUdevice device) noexcept
{
  if (tracking_active()) {
    asyncshim::shim::device_resetting(device);
  } else if (asyncshim::shim::memory_limit_active()) {  // observe mode: the native blocks go with the context
    if (asyncshim::shim::shim_state* s = asyncshim::shim::existing_state()) { s->limits.forget_native(device); }
  }
  return call_real(driver().device_primary_ctx_reset, device);
}

}  // extern "C"
