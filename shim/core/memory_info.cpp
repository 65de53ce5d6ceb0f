// What cudaMemGetInfo and cuMemGetInfo_v2 report under the shim (README,
// "Sharing a GPU"): as free, what the program could still allocate, which is
// the device's free memory plus what this process's pool on that device
// holds unused, frees still queued or in flight and the reuse cache included. The total is the
// driver's. The runtime answers cudaMemGetInfo with cuMemGetInfo_v2, which
// it fetches through cuGetProcAddress (a statically linked runtime too), so
// this one hook serves both APIs however the program reaches them. Under a
// memory limit (ASYNCSHIM_MEMORY_LIMIT) the total is the limit where it is
// smaller, and free no more than the limit leaves.
#include "core/hooks.hpp"

#include "core/lookup_redirect.hpp"
#include "core/memory_limit.hpp"
#include "core/memory_release.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "state/shim_state.hpp"
#include "state/stream_tracker.hpp"

#include <algorithm>
#include <cstdint>

namespace asyncshim::shim {
namespace {

// The current context's device as the shim sees it.
struct device_memory {
  /// What its pool holds that the program could allocate again; 0 when the
  /// shim has no pool there, or does not serve allocations at all (observe
  /// mode, disabled, a forked child).
  std::uint64_t reusable = 0;
  /// Its limit (ASYNCSHIM_MEMORY_LIMIT; 0: none) and what counts against it.
  std::uint64_t limit = 0;
  std::uint64_t used = 0;
};

device_memory seen_by_the_shim(std::uint64_t device_total) noexcept
{
  // The shim's own calls, made inside an intercepted call (the pool's
  // creation reads the device's free memory), get the device's own answer.
  if (current_api_level() != api_level::none) { return {}; }
  shim_state* s = existing_state();
  // A limit applies before the first allocation too (frameworks size themselves first).
  if (s == nullptr && memory_limit_active()) { s = active_state(); }
  auto const& drv = driver();
  int device = 0;
  if (s == nullptr || drv.ctx_get_device == nullptr || drv.ctx_get_device(&device) != CUDA_SUCCESS) { return {}; }
  device_memory seen;
  if (s->limits.any()) {
    seen.limit = s->limits.resolve(device, device_total);
    seen.used = s->limits.native_bytes(device);
  }
  if (!tracking_active()) { return seen; }
  // No device reset destroys the pool meanwhile (a reset takes the access exclusively).
  auto access = tracker().access();
  cuda_async_memory_resource* pool = s->pools.existing(device);
  if (pool == nullptr) { return seen; }
  // Queued frees and the reuse cache's blocks are still used in the pool's
  // eyes; freed blocks in flight on the device are not (the pool counts a
  // block unused from its cudaFreeAsync on). An allocation that finds the
  // pool short waits for all of them.
  pool_usage const usage = usage_of(*pool);
  seen.reusable = usage.unused + s->pending.queued_bytes(device) + s->reuse.held_bytes(device);
  seen.used += usage.reserved;
  return seen;
}

}  // namespace
}  // namespace asyncshim::shim

CUresult asyncshim_hook_mem_get_info(std::size_t* free, std::size_t* total) noexcept
{
  using namespace asyncshim::shim;
  auto const real = driver().mem_get_info;
  if (real == nullptr) { return CUDA_ERROR_NOT_INITIALIZED; }
  CUresult const result = real(free, total);
  if (result != CUDA_SUCCESS || free == nullptr || total == nullptr) { return result; }
  device_memory const seen = seen_by_the_shim(*total);
  if (seen.limit != 0) {
    apply_limit_to_memory_info(seen.limit, seen.used, seen.reusable, *free, *total);
  } else if (seen.reusable > 0) {
    *free = static_cast<std::size_t>(std::min<std::uint64_t>(*total, *free + seen.reusable));
  }
  return result;
}
