#include "context_teardown.hpp"

#include "context_scope.hpp"
#include "driver_binding.hpp"
#include "log.hpp"
#include "peer_access.hpp"
#include "shim_state.hpp"
#include "stream_tracker.hpp"

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
  {
    context_scope in_context{streams.context};
    // Every block of the pool the shim handed out: the program's, and the
    // freed ones still queued (their queue entries are dropped below).
    for (auto const& [ptr, record] : s.registry.take_device(device)) {
      if (drv.mem_free_async != nullptr) { (void)drv.mem_free_async(reinterpret_cast<CUdeviceptr>(ptr), streams.own); }
      if (record.freed) { continue; }
      if (s.stats != nullptr) { s.stats->free_served(device, record.bytes); }
      ++live;
    }
  }
  s.pending.drop(device);
  s.pools.retire(device);
  if (live > 0) { log::info("device {}: {} live allocations from the pool went with its context", device, live); }
}

}  // namespace

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
  if (shim_state* s = existing_state()) { release_device_pool(*s, device); }
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

}  // namespace asyncshim::shim
