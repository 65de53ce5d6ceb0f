#include "core/deferred_frees.hpp"

#include "state/thread_stashes.hpp"

#include "core/memory_release.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/peer_access.hpp"
#include "state/stream_tracker.hpp"
#include "support/device_limit.hpp"
#include "support/log.hpp"

#include <array>
#include <atomic>
#include <chrono>
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

}  // namespace

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

std::optional<cudaError_t> synchronize_primary_context(int device) noexcept
{
  auto const& drv = driver();
  CUcontext primary = nullptr;
  if (drv.device_primary_ctx_retain == nullptr || drv.device_primary_ctx_retain(&primary, device) != CUDA_SUCCESS) {
    return std::nullopt;
  }
  cudaError_t synchronized = cudaSuccess;
  {
    context_scope in_context{primary};
    synchronized =
      in_context.current() ? synchronize_device(api_level::driver) : static_cast<cudaError_t>(in_context.status());
  }
  if (drv.device_primary_ctx_release != nullptr) { (void)drv.device_primary_ctx_release(device); }
  return synchronized;
}

cudaError_t synchronize_with_accessors(int device, api_level level) noexcept
{
  cudaError_t result = synchronize_program_contexts(device);
  if (cudaError_t const synchronized = synchronize_device(level); result == cudaSuccess) { result = synchronized; }
  for_each_accessor(device, [&](int d) {
    std::optional<cudaError_t> const synchronized = synchronize_primary_context(d);
    if (!synchronized) {
      result = cudaErrorInvalidDevice;
    } else if (result == cudaSuccess) {
      result = *synchronized;
    }
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
      if (fenced == cudaSuccess && reusing && s.recurring.recurring(e.record.bytes)) {
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

namespace {

// Frees one block to the pool, in the pool's context, its record gone first
// (the pool may hand the address out again at once): on the shim's stream,
// or on the legacy stream for a block freed in its order (the pool must not
// give its memory back before the work before that free has finished).
void free_to_pool(shim_state& s, cuda_async_memory_resource& pool, CUstream own, reuse_cache::block const& b) noexcept
{
  (void)s.registry.take_freed(b.ptr);
  CUstream const stream = b.in_legacy_order ? CU_STREAM_LEGACY : own;
  cudaError_t const r = pool.try_deallocate_async(b.ptr, reinterpret_cast<cudaStream_t>(stream));
  if (r != cudaSuccess) {
    log::error("a free of {} ({} bytes) to the pool failed ({}): the block stays allocated", b.ptr, b.bytes,
               cuda_status{r});
  }
}

// When a miss may next ask the device whether the oldest batch has completed:
// asking costs a driver call, and a batch found still in flight rarely
// completes within a few microseconds (an issue of the queue asks too).
constexpr std::int64_t ask_again_after_ns = 4'000;
std::array<std::atomic<std::int64_t>, max_devices> next_ask_ns{};

std::int64_t now_ns() noexcept
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

}  // namespace

void collect_completed(shim_state& s, int device) noexcept
{
  auto const& drv = driver();
  if (drv.event_query == nullptr) { return; }
  std::vector<reuse_cache::block> for_the_pool;
  for (;;) {
    reuse_cache::in_flight_batch const oldest = s.reuse.oldest_in_flight(device);
    if (oldest.done == nullptr || drv.event_query(oldest.done) != CUDA_SUCCESS) { return; }
    try {
      for_the_pool.reserve(free_queue::batch_frees);
    } catch (...) {
      return;  // no host memory: the batch stays in flight for now
    }
    for_the_pool.clear();
    cuda_async_memory_resource* pool = s.pools.existing(device);
    if (pool == nullptr) { return; }
    // In the pool's context before the batch is taken: what the limit
    // leaves out must be freed there.
    device_streams const streams = s.pools.streams(device);
    api_level_scope level{api_level::driver};
    context_scope in_context{streams.context};
    if (!in_context.current()) { return; }
    if (!s.reuse.completed(device, oldest.serial, s.pools.reuse_limit(device), for_the_pool)) { continue; }
    // Without room to keep it the event is left alone, not destroyed: another
    // thread may have read it as the oldest and be about to ask about it.
    (void)s.reuse.keep_spare_event(device, oldest.done);
    for (reuse_cache::block const& b : for_the_pool) {
      free_to_pool(s, *pool, streams.own, b);
    }
  }
}

void keep_for_reuse(shim_state& s, int device, cuda_async_memory_resource& pool, device_streams const& streams,
                    reuse_cache::block const* blocks, std::size_t count) noexcept
{
  auto const& drv = driver();
  CUevent done = nullptr;
  bool kept = drv.event_record != nullptr && drv.event_create != nullptr;
  if (kept) {
    done = s.reuse.spare_event(device);
    kept = done != nullptr || drv.event_create(&done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  }
  kept =
    kept && drv.event_record(done, streams.own) == CUDA_SUCCESS && s.reuse.add_in_flight(device, done, blocks, count);
  if (kept) {
    if (s.stats != nullptr) { s.stats->reuse_held(device, s.reuse.counted_bytes(device)); }
    return;
  }
  if (done != nullptr && !s.reuse.keep_spare_event(device, done) && drv.event_destroy != nullptr) {
    (void)drv.event_destroy(done);  // never in flight: nobody else knows it
  }
  for (std::size_t i = 0; i < count; ++i) {
    free_to_pool(s, pool, streams.own, blocks[i]);
  }
}

bool keep_freed_in_order(shim_state& s, int device, void* ptr, std::size_t bytes, std::size_t& to_pool) noexcept
{
  std::uint64_t const limit = s.pools.reuse_limit(device);
  reuse_cache::block const freed{ptr, bytes, true};
  bool kept = s.reuse.keep_in_legacy_order(device, freed, limit);
  cuda_async_memory_resource* pool = kept || bytes > limit ? nullptr : s.pools.existing(device);
  if (pool != nullptr) {
    // The newest block stays rather than the thread's older ones, which go to
    // the pool as a flush would give them: a size the program has moved on
    // from would otherwise keep its new size out of the cache for good.
    std::array<reuse_cache::block, thread_stashes::slots> room{};
    api_level_scope level{api_level::driver};  // under the stream tracker's locks: no runtime call
    std::size_t const n = s.reuse.make_room(device, bytes, limit, room.data(), room.size());
    for (std::size_t i = 0; i < n; ++i) {
      free_to_pool(s, *pool, s.pools.streams(device).own, room[i]);
      to_pool += room[i].bytes;
    }
    kept = n > 0 && s.reuse.keep_in_legacy_order(device, freed, limit);
  }
  if (kept && s.stats != nullptr) { s.stats->reuse_held(device, s.reuse.counted_bytes(device)); }
  return kept;
}

void* reused_block(shim_state& s, int device, std::size_t bytes) noexcept
{
  void* found = s.reuse.take(device, bytes);
  if (found == nullptr && device >= 0 && device < max_devices && s.reuse.oldest_in_flight(device).done != nullptr) {
    std::atomic<std::int64_t>& next = next_ask_ns[static_cast<std::size_t>(device)];
    std::int64_t const now = now_ns();
    if (now >= next.load(std::memory_order_relaxed)) {
      next.store(now + ask_again_after_ns, std::memory_order_relaxed);
      collect_completed(s, device);
      found = s.reuse.take(device, bytes);
    }
  }
  if (found == nullptr) { s.recurring.missed(bytes); }
  if (s.stats != nullptr) {
    if (found != nullptr) {
      s.stats->reuse_hit(device);
    } else {
      s.stats->reuse_miss(device);
    }
  }
  return found;
}

namespace {

std::size_t return_to_pool(shim_state& s, int device, std::vector<CUevent>* events) noexcept
{
  if (!s.reuse.holds_anything(device) && events == nullptr) { return 0; }
  cuda_async_memory_resource* pool = s.pools.existing(device);
  if (pool == nullptr) { return 0; }
  device_streams const streams = s.pools.streams(device);
  api_level_scope level{api_level::driver};
  context_scope in_context{streams.context};
  if (!in_context.current()) { return 0; }  // they stay cached for the next try
  std::vector<reuse_cache::block> blocks;
  s.reuse.take_all(device, blocks, events);
  std::size_t bytes = 0;
  for (reuse_cache::block const& b : blocks) {
    free_to_pool(s, *pool, streams.own, b);
    bytes += b.bytes;
  }
  return bytes;
}

}  // namespace

std::size_t return_cached_to_pool(shim_state& s, int device) noexcept { return return_to_pool(s, device, nullptr); }

void return_cached_to_pool_at_reset(shim_state& s, int device) noexcept
{
  std::vector<CUevent> events;
  (void)return_to_pool(s, device, &events);
  // Whatever could not be handed over goes with the pool and its context:
  // the next pool must never see these addresses or events.
  s.reuse.forget(device);
  // An event whose record is still pending is released once it completes.
  auto const destroy = driver().event_destroy;
  for (CUevent e : events) {
    if (destroy != nullptr) { (void)destroy(e); }
  }
}

namespace {

// Completed batches an issue forgets at most (each costs a cuEventQuery).
constexpr int forget_per_issue = 2;

std::uint64_t waiting_bytes(shim_state& s, int device) noexcept
{
  return s.pending.queued_bytes(device) + s.issued.bytes(device);
}

// Forgets the oldest batches whose events have completed, at most `most`.
void forget_completed(shim_state& s, int device, int most) noexcept
{
  auto const query = driver().event_query;
  if (query == nullptr) { return; }
  for (int i = 0; i < most; ++i) {
    issued_frees::batch_name const oldest = s.issued.oldest(device);
    if (oldest.done == nullptr || query(oldest.done) == CUDA_ERROR_NOT_READY) { return; }
    (void)s.issued.completed(device, oldest.serial);
  }
}

}  // namespace

bool waiting_over_limit(shim_state& s, int device) noexcept
{
  std::uint64_t const waiting = waiting_bytes(s, device);
  if (s.stats != nullptr) { s.stats->backlog_seen(device, waiting); }
  return waiting > s.pools.backlog_limit(device);
}

void note_issued_batch(shim_state& s, int device, CUstream own, std::uint64_t bytes) noexcept
{
  if (bytes == 0 || !limits_backlog(s, device)) { return; }
  auto const& drv = driver();
  if (drv.event_record == nullptr || drv.event_create == nullptr || drv.event_query == nullptr) { return; }
  // Batches the device has caught up with are forgotten here too, a few per
  // issue, so that a device that keeps up never has a long list (nor many
  // events) behind it.
  forget_completed(s, device, forget_per_issue);
  CUevent done = s.issued.spare_event(device);
  if (done == nullptr && drv.event_create(&done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) { return; }
  // Not remembered (no event record, no host memory): this batch is not
  // waited for; the limit is about memory, never about correctness. The event
  // goes back to the spares, not destroyed: a recycled one may still be held
  // by a thread that read it as the oldest of an earlier batch.
  if (drv.event_record(done, own) == CUDA_SUCCESS && s.issued.add(device, done, bytes)) { return; }
  s.issued.keep_spare_event(device, done);
}

void wait_for_backlog(shim_state& s, int device) noexcept
{
  auto const& drv = driver();
  if (drv.event_synchronize == nullptr || drv.event_query == nullptr) { return; }
  stream_tracker& streams = tracker();
  auto access = streams.access();
  if (streams.captures_in_progress() || s.pools.existing(device) == nullptr) { return; }
  device_streams const own = s.pools.streams(device);
  api_level_scope level{api_level::driver};
  context_scope in_context{own.context};
  if (!in_context.current()) { return; }
  // Down to half the limit, so that the frees after this one do not each
  // find the backlog over the limit again and wait for one small batch each.
  std::uint64_t const down_to = s.pools.backlog_limit(device) / 2;
  auto const start = std::chrono::steady_clock::now();
  bool waited = false;
  while (waiting_bytes(s, device) > down_to) {
    issued_frees::batch_name const oldest = s.issued.oldest(device);
    if (oldest.done == nullptr) { break; }  // nothing issued left: the queue itself is over
    if (drv.event_query(oldest.done) == CUDA_ERROR_NOT_READY) {
      // Still the oldest batch? Its event may have been recorded again for a
      // newer one meanwhile, whose work this free need not wait for.
      if (s.issued.oldest(device).serial != oldest.serial) { continue; }
      // An error of the program's earlier work also ends the wait: its own
      // calls report it.
      if (drv.event_synchronize(oldest.done) != CUDA_SUCCESS) { break; }
      waited = true;
    }
    (void)s.issued.completed(device, oldest.serial);  // false: another thread saw it first
  }
  if (s.stats != nullptr) {
    auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    s.stats->backlog_over(device, waited, waited ? static_cast<std::uint64_t>(ns.count()) : 0);
  }
}

void forget_completed_batches(shim_state& s, int device) noexcept
{
  if (!limits_backlog(s, device)) { return; }
  forget_completed(s, device, 1 << 30);
}

void forget_issued_at_reset(shim_state& s, int device) noexcept
{
  std::vector<CUevent> events;
  s.issued.take_all(device, events);
  auto const destroy = driver().event_destroy;
  for (CUevent e : events) {
    if (destroy != nullptr) { (void)destroy(e); }
  }
}

}  // namespace asyncshim::shim
