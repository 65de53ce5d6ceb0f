#include "pool_release.hpp"

#include "byte_text.hpp"
#include "context_scope.hpp"
#include "device_limit.hpp"
#include "driver_binding.hpp"
#include "log.hpp"
#include "pending_frees.hpp"

#include <array>
#include <atomic>
#include <chrono>

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
  auto const& drv = driver();
  if (drv.mem_pool_trim_to == nullptr) { return 0; }
  std::uint64_t const before = usage_of(pool).reserved;
  if (drv.mem_pool_trim_to(handle_of(pool), s.pools.kept_bytes(device)) != CUDA_SUCCESS) { return 0; }
  std::uint64_t const after = usage_of(pool).reserved;
  return before > after ? before - after : 0;
}

}  // namespace

pool_usage usage_of(cuda_async_memory_resource const& pool) noexcept
{
  std::uint64_t const reserved = pool_attribute(handle_of(pool), CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  std::uint64_t const used = pool_attribute(handle_of(pool), CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  return {reserved, reserved > used ? reserved - used : 0};
}

void note_freed(shim_state& s, int device, std::size_t bytes, CUstream stream) noexcept
{
  freed_since_look += bytes;
  if (freed_since_look < pending_frees::batch_bytes) { return; }
  freed_since_look = 0;
  if (device < 0 || device >= max_devices) { return; }
  cuda_async_memory_resource* pool = s.pools.existing(device);
  if (pool == nullptr) { return; }
  std::uint64_t const kept = s.pools.kept_bytes(device);
  std::uint64_t const unused = usage_of(*pool).unused;
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
  // The frees just made complete on the device first (the trim can only give
  // back memory whose frees have completed), as native cudaFree waits.
  if (drv.stream_synchronize == nullptr || drv.stream_synchronize(stream) != CUDA_SUCCESS) { return; }
  std::uint64_t const released = trim(s, device, *pool);
  if (!log::enabled(log::log_level::info)) { return; }
  try {
    log::info("device {}: the device had {} free while the asyncshim pool held {} unused: gave {} back", device,
              approximate_bytes(device_free), approximate_bytes(unused), approximate_bytes(released));
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
  if (pool == nullptr || releasable_bytes(s, device) == 0) { return 0; }
  context_scope in_context{s.pools.streams(device).context};
  if (!in_context.current()) { return 0; }
  return trim(s, device, *pool);
}

}  // namespace asyncshim::shim
