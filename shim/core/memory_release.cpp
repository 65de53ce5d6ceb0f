#include "core/memory_release.hpp"

#include "core/deferred_frees.hpp"
#include "core/metrics_file.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "state/deferred_frees.hpp"
#include "state/shim_state.hpp"
#include "state/stream_tracker.hpp"
#include "support/background_thread.hpp"
#include "support/device_limit.hpp"
#include "support/log.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace asyncshim::shim {
namespace {

// Bytes this thread has freed since its last look at a pool: looking costs two
// pool queries, so a thread looks once per batch's worth of frees.
__attribute__((tls_model("initial-exec"))) thread_local std::size_t freed_since_look = 0;

// Per device, when the device's free memory was last read and how much the
// pool held unused then (when the device was not short): the next look reads
// it again only once the pool holds twice as much or a second has passed, so
// that a busy pool does not pay for that read (6 us) on every batch.
struct device_look {
  std::atomic<std::int64_t> at_ns{0};
  std::atomic<std::uint64_t> unused{0};
};
std::array<device_look, max_devices> last_look{};

constexpr std::int64_t look_again_after_ns = 1'000'000'000;

std::int64_t now_ns() noexcept
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

std::uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attribute) noexcept
{
  auto const get = driver().mem_pool_get_attribute;
  cuuint64_t value = 0;
  if (get == nullptr || get(pool, attribute, &value) != CUDA_SUCCESS) { return 0; }
  return value;
}

CUmemoryPool handle_of(cuda_async_memory_resource const& pool) noexcept
{
  return reinterpret_cast<CUmemoryPool>(pool.pool_handle());
}

// Trims the pool to what it keeps; in the pool's context. The bytes given back.
std::uint64_t trim(shim_state& s, int device, cuda_async_memory_resource& pool) noexcept
{
  std::uint64_t const before = usage_of(pool).reserved;
  if (!trim_pool_to(pool, s.pools.kept_bytes(device))) { return 0; }
  std::uint64_t const after = usage_of(pool).reserved;
  return before > after ? before - after : 0;
}

}  // namespace

bool trim_pool_to(cuda_async_memory_resource& pool, std::uint64_t keep) noexcept
{
  auto const& drv = driver();
  return drv.mem_pool_trim_to != nullptr && drv.mem_pool_trim_to(handle_of(pool), keep) == CUDA_SUCCESS;
}

pool_usage usage_of(cuda_async_memory_resource const& pool) noexcept
{
  std::uint64_t const reserved = pool_attribute(handle_of(pool), CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  std::uint64_t const used = pool_attribute(handle_of(pool), CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  return {reserved, reserved > used ? reserved - used : 0};
}

void note_freed(shim_state& s, int device, std::size_t bytes, CUstream stream) noexcept
{
  freed_since_look += bytes;
  if (freed_since_look < free_queue::batch_bytes) { return; }
  freed_since_look = 0;
  if (device < 0 || device >= max_devices) { return; }
  cuda_async_memory_resource* pool = s.pools.existing(device);
  if (pool == nullptr) { return; }
  std::uint64_t const kept = s.pools.kept_bytes(device);
  // The reuse cache's blocks are unused memory too (they go back to the pool first).
  std::uint64_t const unused = usage_of(*pool).unused + s.reuse.held_bytes(device);
  if (unused <= kept || unused <= short_device_floor) { return; }
  device_look& look = last_look[static_cast<std::size_t>(device)];
  std::int64_t const now = now_ns();
  bool const doubled = unused > 2 * look.unused.load(std::memory_order_relaxed);
  if (!doubled && now - look.at_ns.load(std::memory_order_relaxed) < look_again_after_ns) { return; }

  auto const& drv = driver();
  context_scope in_context{s.pools.streams(device).context};
  std::size_t device_free = 0;
  std::size_t total = 0;
  if (!in_context.current() || drv.mem_get_info == nullptr || drv.mem_get_info(&device_free, &total) != CUDA_SUCCESS) {
    return;
  }
  look.at_ns.store(now, std::memory_order_relaxed);
  if (device_free >= unused) {  // not short: the pool keeps it
    look.unused.store(unused, std::memory_order_relaxed);
    return;
  }
  look.unused.store(0, std::memory_order_relaxed);
  (void)return_cached_to_pool(s, device);
  // The frees just made complete on the device first (the trim can only give
  // back memory whose frees have completed), as native cudaFree waits.
  if (drv.stream_synchronize == nullptr || drv.stream_synchronize(stream) != CUDA_SUCCESS) { return; }
  std::uint64_t const released = trim(s, device, *pool);
  if (!log::enabled(log::log_level::info)) { return; }
  try {
    log::info("device {}: the device had {} free while the asyncshim pool held {} unused: gave {} back", device,
              byte_count{device_free}, byte_count{unused}, byte_count{released});
  } catch (...) {  // no host memory for the message
  }
}

std::uint64_t releasable_bytes(shim_state& s, int device) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(device);
  if (pool == nullptr) { return 0; }
  pool_usage const usage = usage_of(*pool);
  std::uint64_t const kept = s.pools.kept_bytes(device);
  // Trimming leaves at least `kept` reserved: only what is above it, and unused, goes.
  std::uint64_t const above_kept = usage.reserved > kept ? usage.reserved - kept : 0;
  return usage.unused < above_kept ? usage.unused : above_kept;
}

std::uint64_t release_unused(shim_state& s, int device) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(device);
  if (pool == nullptr) { return 0; }
  // What the reuse cache holds goes back first; blocks whose frees are
  // still in flight on the device are given back at a later release.
  (void)return_cached_to_pool(s, device);
  if (releasable_bytes(s, device) == 0) { return 0; }
  context_scope in_context{s.pools.streams(device).context};
  if (!in_context.current()) { return 0; }
  return trim(s, device, *pool);
}

// ---- The idle release.

namespace {

// Only pools give memory back (observe mode has none).
bool releases_when_idle(shim_state const& s) noexcept
{
  return s.settings.idle_release_ms != 0 && s.settings.mode == config::shim_mode::pool;
}

// The thread's lock, held while it works, so that the exit handler, which
// takes it to stop the thread, waits for work in progress. Never destroyed.
struct idle_thread_control {
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
};

idle_thread_control* control() noexcept
{
  static auto* const made = new (std::nothrow) idle_thread_control;
  return made;
}

// An exit handler, registered after CUDA is initialized: it runs before the
// runtime's own teardown, and after it the thread makes no CUDA call. A
// forked child has no such thread, and its copy of the lock may be held by
// the parent's thread forever: it does nothing.
void stop_at_exit() noexcept
{
  if (in_forked_child()) { return; }
  idle_thread_control& c = *control();
  std::lock_guard lock{c.mutex};
  c.stopping = true;
  c.wake.notify_all();
  if (shim_state* s = existing_state(); s != nullptr && wants_metrics_file(*s)) { remove_metrics_file(*s); }
}

void run(shim_state& s) noexcept
{
  using clock = std::chrono::steady_clock;
  idle_thread_control& c = *control();
  bool const idle_release = releases_when_idle(s);
  bool const metrics = wants_metrics_file(s);
  auto const period = std::chrono::milliseconds{s.settings.idle_release_ms};
  auto const metrics_period = std::chrono::milliseconds{s.settings.metrics_interval_ms};
  std::uint64_t seen = s.registry.activity();
  std::unique_lock lock{c.mutex};
  auto next_release = clock::now() + period;
  auto next_metrics = clock::now();  // written at once, then every interval
  while (!c.stopping) {
    auto const deadline = !metrics ? next_release : !idle_release ? next_metrics : std::min(next_release, next_metrics);
    // Looks whether the program's threads have all ended (the thread then
    // ends too) at the deadline, and once a second before a later one.
    bool program_ended = false;
    while (!c.stopping && clock::now() < deadline) {
      auto const look = std::min(deadline, clock::now() + std::chrono::seconds{1});
      if (c.wake.wait_until(lock, look, [&] { return c.stopping; })) { break; }
      if ((program_ended = only_background_threads_left())) { break; }
    }
    if (c.stopping || program_ended) { break; }
    if (metrics && clock::now() >= next_metrics) {
      write_metrics_file(s);
      next_metrics = clock::now() + metrics_period;
    }
    if (!idle_release || clock::now() < next_release) { continue; }
    next_release = clock::now() + period;
    std::uint64_t const now = s.registry.activity();
    if (now != seen) {  // busy: look again after another whole period
      seen = now;
      continue;
    }
    release_when_idle(s);
  }
}

void* thread_main(void* state) noexcept
{
  run(*static_cast<shim_state*>(state));
  return nullptr;
}

}  // namespace

void release_when_idle(shim_state& s) noexcept
{
  issue_all_queued_frees();
  stream_tracker& streams = tracker();
  if (streams.captures_in_progress()) { return; }
  auto access = streams.access();
  if (streams.captures_in_progress()) { return; }
  for (int device = 0; device < max_devices; ++device) {
    std::uint64_t const released = release_unused(s, device);
    if (released == 0 || !log::enabled(log::log_level::info)) { continue; }
    try {
      log::info("device {}: no allocation or free for {}: gave {} of unused asyncshim pool memory back", device,
                config::duration_text(s.settings.idle_release_ms), byte_count{released});
    } catch (...) {  // no host memory for the message
    }
  }
}

void start_idle_release_thread(shim_state& s) noexcept
{
  if (s.idle_release_started.exchange(true, std::memory_order_acq_rel)) { return; }
  if (!releases_when_idle(s) && !wants_metrics_file(s)) { return; }
  char const* const what = releases_when_idle(s)
                             ? "the idle release: unused pool memory goes back only when the device runs short"
                             : "the metrics file: none is written";
  // Without a way to stop it before CUDA's teardown, no thread.
  if (control() == nullptr || std::atexit(stop_at_exit) != 0) {
    log::warn("cannot start {} (no memory for it)", what);
    return;
  }
  char const* const name = releases_when_idle(s) ? "asyncshim-idle" : "asyncshim-metric";
  if (int const made = start_background_thread(thread_main, &s, name); made != 0) {
    log::warn("cannot start {} ({})", what, std::strerror(made));
  }
}

}  // namespace asyncshim::shim
