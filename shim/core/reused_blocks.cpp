#include "core/reused_blocks.hpp"

#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/free_queue.hpp"
#include "support/device_limit.hpp"
#include "support/log.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace asyncshim::shim {
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
    if (s.stats != nullptr) { s.stats->reuse_held(device, s.reuse.held_bytes(device)); }
    return;
  }
  if (done != nullptr && !s.reuse.keep_spare_event(device, done) && drv.event_destroy != nullptr) {
    (void)drv.event_destroy(done);  // never in flight: nobody else knows it
  }
  for (std::size_t i = 0; i < count; ++i) {
    free_to_pool(s, pool, streams.own, blocks[i]);
  }
}

bool keep_freed_in_order(shim_state& s, int device, void* ptr, std::size_t bytes) noexcept
{
  if (!s.reuse.keep_in_legacy_order(device, {ptr, bytes, true}, s.pools.reuse_limit(device))) { return false; }
  if (s.stats != nullptr) { s.stats->reuse_held(device, s.reuse.held_bytes(device)); }
  return true;
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

}  // namespace asyncshim::shim
