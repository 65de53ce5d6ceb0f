#include "core/out_of_memory.hpp"

#include "core/deferred_frees.hpp"
#include "cuda/driver.hpp"
#include "state/leak_report.hpp"
#include "state/live_blocks.hpp"
#include "support/log.hpp"

#include <array>
#include <atomic>
#include <cstdint>

namespace asyncshim::shim {
namespace {

constexpr std::size_t largest_blocks_reported = 5;

// The call sites already reported (0: a free slot); beyond them every
// failure is reported.
std::array<std::atomic<std::uintptr_t>, 64> reported_sites{};

bool first_at_site(interposed_call call, void const* caller) noexcept
{
  std::uintptr_t const site =
    (reinterpret_cast<std::uintptr_t>(caller) ^ (static_cast<std::uintptr_t>(call) + 1) << 56) | 1;
  for (auto& slot : reported_sites) {
    std::uintptr_t seen = slot.load(std::memory_order_acquire);
    if (seen == site) { return false; }
    if (seen == 0) {
      if (slot.compare_exchange_strong(seen, site, std::memory_order_acq_rel)) { return true; }
      if (seen == site) { return false; }
    }
  }
  return true;
}

// The program's largest live blocks on `device`, each with where it was
// allocated: who holds the memory, inside the process.
void report_largest_blocks(live_blocks const& blocks, int device)
{
  std::vector<live_block> const largest = blocks.largest(device, largest_blocks_reported);
  if (largest.empty()) { return; }
  log::warn("  the largest blocks the program holds on device {}, with where each was allocated:", device);
  for (live_block const& b : largest) {
    std::string frames;
    for (void* frame : b.stack) {
      frames += (frames.empty() ? "" : " <- ") + stack_frame_text(frame);
    }
    log::warn("    {} at {:#x} by {}: {}", byte_count{b.bytes}, b.address, to_string(b.call),
              frames.empty() ? std::string("(no frames)") : frames);
  }
}

}  // namespace

void trim_pool_after(cuda_async_memory_resource& pool, CUstream stream) noexcept
{
  auto const& drv = driver();
  if (drv.stream_synchronize != nullptr) { (void)drv.stream_synchronize(stream); }
  if (drv.mem_pool_trim_to != nullptr) {
    (void)drv.mem_pool_trim_to(reinterpret_cast<CUmemoryPool>(pool.pool_handle()), 0);
  }
}

held_back held_back_of(shim_state& s, int device) noexcept
{
  return {s.reuse.held_bytes(device), s.pending.queued_bytes(device)};
}

void report_out_of_memory(shim_state& s, failed_request const& request, cuda_async_memory_resource& pool,
                          held_back before_recovery) noexcept
{
  if (!log::enabled(log::log_level::warn) || !first_at_site(request.call, request.caller)) { return; }
  auto const& drv = driver();
  cuuint64_t reserved = 0;
  cuuint64_t used = 0;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  auto const handle = reinterpret_cast<CUmemoryPool>(pool.pool_handle());
  if (drv.mem_pool_get_attribute != nullptr) {
    (void)drv.mem_pool_get_attribute(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    (void)drv.mem_pool_get_attribute(handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  }
  if (drv.mem_get_info != nullptr) { (void)drv.mem_get_info(&free_bytes, &total_bytes); }
  std::uint64_t const limit = s.limits.limit(request.device).value_or(0);
  try {
    std::string const limit_text =
      limit == 0 ? std::string{} : fmt::format(" inside the limit of {} (ASYNCSHIM_MEMORY_LIMIT)", byte_count{limit});
    std::uint64_t const native = s.limits.native_bytes(request.device);
    std::string const native_text =
      native == 0 ? std::string{} : fmt::format(", and {} more was passed to the native allocator", byte_count{native});
    std::string const held_text =
      before_recovery.cached + before_recovery.queued == 0
        ? std::string{}
        : fmt::format("; before retrying, the shim gave back {} kept for reuse and issued {} of queued frees",
                      byte_count{before_recovery.cached}, byte_count{before_recovery.queued});
    log::warn("{}({} bytes = {}) on device {}: out of memory{}; the pool has {} reserved, {} of it in use{}; the "
              "device has {} free of {}{}",
              to_string(request.call), request.size, byte_count{request.size}, request.device, limit_text,
              byte_count{reserved}, byte_count{used}, native_text, byte_count{free_bytes}, byte_count{total_bytes},
              held_text);
    if (s.leaks != nullptr && s.settings.leak_stack_depth > 0) { report_largest_blocks(*s.leaks, request.device); }
  } catch (...) {  // no host memory for the message
  }
}

void recover_for_allocation(shim_state& s, int device, cuda_async_memory_resource& pool, CUstream own,
                            bool during_capture) noexcept
{
  auto const& drv = driver();
  if (!during_capture) {
    issue_queued(s, device);
    (void)return_cached_to_pool(s, device);
  }
  // The frees just issued and the cache's blocks just given back come back
  // to the pool once they have completed: they are on the shim's stream and
  // the legacy stream. Under stream ordering on per-thread streams a free may
  // be on any thread's stream, which only the device covers (as native
  // cudaFree would have waited for it); never during a capture.
  if (!during_capture && s.settings.ordering == config::ordering_mode::stream &&
      s.settings.stream == config::stream_choice::per_thread && drv.ctx_synchronize != nullptr) {
    (void)drv.ctx_synchronize();
  } else if (drv.stream_synchronize != nullptr) {
    (void)drv.stream_synchronize(own);
    if (!during_capture) { (void)drv.stream_synchronize(CU_STREAM_LEGACY); }
  }
  forget_completed_batches(s, device);
  if (drv.mem_pool_trim_to != nullptr) {
    (void)drv.mem_pool_trim_to(reinterpret_cast<CUmemoryPool>(pool.pool_handle()), 0);
  }
}

}  // namespace asyncshim::shim
