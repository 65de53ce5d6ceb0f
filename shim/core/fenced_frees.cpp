#include "core/fenced_frees.hpp"

#include "core/free_backlog.hpp"
#include "core/memory_release.hpp"
#include "core/reused_blocks.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/peer_access.hpp"
#include "state/stream_tracker.hpp"
#include "support/log.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace asyncshim::shim {

bool in_pool_context(shim_state& s, int device) noexcept
{
  CUcontext const current = current_context();
  return current != nullptr && current == s.pools.streams(device).context;
}

namespace {

// Calls each(d) for every other device given access to `device`'s memory.
template <class Each>
void for_each_accessor(int device, Each each)
{
  std::uint64_t accessors = peer_access().accessors_of(device);
  for (int d = 0; accessors != 0; ++d, accessors >>= 1) {
    if ((accessors & 1) != 0 && d != device) { each(d); }
  }
}

// The host waits for the contexts the program made on `device`: neither a
// fence nor a synchronization of the device's primary context reaches their
// legacy and blocking streams.
cudaError_t synchronize_program_contexts(int device) noexcept
{
  cudaError_t result = cudaSuccess;
  tracker().for_each_program_context(device, [&](CUcontext context) {
    context_scope in_context{context};
    cudaError_t const synchronized =
      in_context.current() ? synchronize_device(api_level::driver) : static_cast<cudaError_t>(in_context.status());
    if (result == cudaSuccess) { result = synchronized; }
  });
  return result;
}

}  // namespace

cudaError_t synchronize_with_accessors(int device, api_level level) noexcept
{
  cudaError_t result = synchronize_program_contexts(device);
  if (cudaError_t const synchronized = synchronize_device(level); result == cudaSuccess) { result = synchronized; }
  auto const& drv = driver();
  for_each_accessor(device, [&](int d) {
    CUcontext primary = nullptr;
    if (drv.device_primary_ctx_retain == nullptr || drv.device_primary_ctx_retain(&primary, d) != CUDA_SUCCESS) {
      result = cudaErrorInvalidDevice;
      return;
    }
    {
      context_scope in_context{primary};
      cudaError_t const synchronized =
        in_context.current() ? synchronize_device(api_level::driver) : static_cast<cudaError_t>(in_context.status());
      if (result == cudaSuccess) { result = synchronized; }
    }
    if (drv.device_primary_ctx_release != nullptr) { (void)drv.device_primary_ctx_release(d); }
  });
  return result;
}

cudaError_t fence_or_synchronize(shim_state& s, int device, api_level level) noexcept
{
  if (cudaError_t const r = synchronize_program_contexts(device); r != cudaSuccess) { return r; }
  device_streams const& streams = s.pools.streams(device);
  // A device given access may use a block on its legacy, blocking and
  // per-thread streams: its legacy stream is fenced too, with the event of
  // the shim's pool there; one without such a pool is waited for on the host.
  std::array<stream_tracker::other_legacy, max_devices> others{};
  std::size_t other_count = 0;
  bool fenceable = true;
  for_each_accessor(device, [&](int d) {
    if (s.pools.existing(d) == nullptr) {
      fenceable = false;
      return;
    }
    device_streams const& theirs = s.pools.streams(d);
    others[other_count++] = {theirs.context, theirs.legacy_fence};
  });
  if (fenceable && tracker().fence(streams.own, streams.legacy_fence, others.data(), other_count) == CUDA_SUCCESS) {
    return cudaSuccess;
  }
  return synchronize_with_accessors(device, level);
}

// The fence comes later than each free of the chunk, so it covers everything
// submitted before each of them; the pool hands a block out again only once
// its free has completed on the device.
std::size_t issue_queued(shim_state& s, int device) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(device);
  if (pool == nullptr) {
    // A reset took the pool with its blocks (and their records): nothing to issue.
    s.pending.drop(device);
    return 0;
  }
  device_streams const streams = s.pools.streams(device);
  api_level_scope level{api_level::driver};
  context_scope in_context{streams.context};
  if (!in_context.current()) { return 0; }  // they stay queued for the next try
  std::size_t issued = 0;
  std::vector<free_queue::entry> failed;  // allocates only when a free fails
  std::array<free_queue::entry, free_queue::batch_frees> chunk;
  std::array<reuse_cache::block, free_queue::batch_frees> kept;
  bool const reusing = reuses_blocks(s, device);
  for (;;) {
    std::size_t const count = s.pending.take(device, chunk.data(), chunk.size());
    if (count == 0) { break; }
    cudaError_t const fenced = fence_or_synchronize(s, device, api_level::driver);
    std::size_t kept_count = 0;
    std::size_t const issued_before = issued;
    for (std::size_t i = 0; i < count; ++i) {
      free_queue::entry& e = chunk[i];
      // Kept for reuse below (or freed to the pool there), its record still
      // claimed: a second free of it is still a double free.
      if (fenced == cudaSuccess && reusing) {
        if (!s.registry.claimed(e.ptr)) { continue; }  // dropped by a reset
        kept[kept_count++] = {e.ptr, e.record.bytes};
        issued += e.record.bytes;
        continue;
      }
      // Still claimed: not dropped by a reset, nor a second entry for an
      // address already handed back.
      std::optional<allocation_record> const claimed = s.registry.take_freed(e.ptr);
      if (!claimed) { continue; }
      cudaError_t const r =
        fenced == cudaSuccess ? pool->try_deallocate_async(e.ptr, reinterpret_cast<cudaStream_t>(streams.own)) : fenced;
      if (r == cudaSuccess) {
        issued += claimed->bytes;
        continue;
      }
      // Still the shim's block, freed: the record goes back, also when it is not tried again.
      bool const recorded = s.registry.put_back(e.ptr, *claimed);
      constexpr int attempts = 3;
      if (++e.failures < attempts && recorded) {
        try {
          failed.push_back(e);
          continue;
        } catch (...) {
        }
      }
      log::error("a queued free of {} on device {} failed {} times ({}): the block stays allocated", e.ptr,
                 e.record.device, e.failures, cuda_status{r});
    }
    if (kept_count > 0) { keep_for_reuse(s, device, *pool, streams, kept.data(), kept_count); }
    note_issued_batch(s, device, streams.own, issued - issued_before);
    if (count < chunk.size()) { break; }
  }
  for (free_queue::entry const& e : failed) {
    (void)s.pending.add(e, false);
  }  // tried again with the next batch
  // Earlier batches may have completed meanwhile: their blocks can be reused.
  if (reusing) { collect_completed(s, device); }
  return issued;
}

namespace {

// Issues the queues of the devices `devices_now()` names (a bit mask, read
// once the tracker's access is held), if no capture is in progress. For the
// program's own frees (`program_thread`), what was issued then counts towards
// the look at whether the device runs short (core/memory_release.hpp); the idle
// release's thread never waits for the device.
template <class DeviceMask>
void issue_unless_capturing(shim_state& s, DeviceMask devices_now, bool program_thread) noexcept
{
  stream_tracker& streams = tracker();
  if (streams.captures_in_progress()) { return; }
  auto access = streams.access();
  if (streams.captures_in_progress()) { return; }
  std::uint64_t const devices = devices_now();
  for (int device = 0; device < max_devices; ++device) {
    if ((devices >> device & 1U) == 0) { continue; }
    std::size_t const issued = issue_queued(s, device);
    if (program_thread && issued > 0) { note_freed(s, device, issued, s.pools.streams(device).own); }
  }
}

}  // namespace

void issue_urgent_queues(shim_state& s) noexcept
{
  if (tracker().captures_in_progress()) {
    // Frees wait: make sure it is for a capture that is still going on.
    static std::atomic<unsigned> calls{0};
    if (calls.fetch_add(1, std::memory_order_relaxed) % 64 == 0) { tracker().recheck_captures(); }
  }
  issue_unless_capturing(
    s, [&] { return s.pending.urgent_devices(); }, true);
}

cudaError_t queue_free(shim_state& s, void* ptr, allocation_record const& record, bool urgent) noexcept
{
  auto const [added, due] = s.pending.add({ptr, record}, urgent);
  if (!added) { return cudaErrorMemoryAllocation; }
  // More freed memory waiting for the device than ASYNCSHIM_FREE_BACKLOG
  // allows: the queue goes now, and this free waits for the oldest.
  bool const over_backlog = !urgent && backlog_over_limit(s, record.device);
  if (due || over_backlog) {
    std::uint64_t const device_bit = std::uint64_t{1} << record.device;  // add() accepted the device
    issue_unless_capturing(
      s, [device_bit] { return device_bit; }, true);
  }
  if (over_backlog) { wait_for_backlog(s, record.device); }
  return cudaSuccess;
}

void issue_urgent_frees() noexcept
{
  if (shim_state* s = existing_state()) { issue_urgent(*s); }
}

void issue_all_queued_frees() noexcept
{
  // Not from inside an intercepted call (the shim's own synchronization in
  // sync ordering reaches the followed cuCtxSynchronize through the runtime):
  // that thread holds the tracker's access already.
  if (current_api_level() != api_level::none) { return; }
  shim_state* s = existing_state();
  if (s == nullptr) { return; }
  if (s->backlog_limited) {  // after a synchronization every issued free has completed
    for (int device = 0; device < max_devices; ++device) {
      forget_completed_batches(*s, device);
    }
  }
  if (s->pending.queued_devices() == 0) { return; }
  issue_unless_capturing(
    *s, [s] { return s->pending.queued_devices(); }, false);
}

}  // namespace asyncshim::shim
