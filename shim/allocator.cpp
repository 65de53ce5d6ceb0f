#include "allocator.hpp"

#include "allocation_registry.hpp"
#include "device_pools.hpp"
#include "log.hpp"
#include "process_settings.hpp"
#include "runtime_binding.hpp"
#include "statistics.hpp"
#include "stats_report.hpp"

#include <new>

namespace asyncshim::shim {
namespace {

// Process-wide state, made on the first interposed call and never destroyed:
// calls may still arrive from atexit handlers and static destructors.
struct shim_state {
  explicit shim_state(config::settings const& s) : settings{s}, pools{s} {}
  config::settings const& settings;
  device_pools pools;
  allocation_registry registry;
  statistics all_stats;
  // What the calls count into: null unless statistics were asked for.
  statistics* stats = settings.wants_stats() ? &all_stats : nullptr;
  report_sources sources{settings, all_stats, pools};
};

shim_state& state()
{
  static auto* instance = new shim_state{process_settings()};
  return *instance;
}

// After the first call into the program's runtime (so the exit handler runs
// before the runtime's own teardown).
void arm_report(shim_state& s) noexcept
{
  if (s.stats) { report_at_exit(s.sources); }
}

cudaStream_t allocation_stream(config::settings const& settings) noexcept
{
  return settings.stream == config::stream_choice::per_thread ? cudaStreamPerThread : cudaStreamLegacy;
}

void count_passthrough(shim_state& s, int device, passthrough_reason reason) noexcept
{
  if (s.stats) { s.stats->allocation_passed_through(device, reason); }
}

// Frees a pool pointer on the stream of the device that owns it, switching the
// thread's current device for the call when it differs.
cudaError_t free_to_pool(shim_state& s, void* ptr, allocation_record const& record) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(record.device);
  if (pool == nullptr) { return cudaErrorInvalidValue; }  // cannot happen: records exist only for pools
  auto const& rt = runtime();
  int current = record.device;
  if (rt.get_device(&current) != cudaSuccess) { current = record.device; }
  if (current != record.device) { (void)rt.set_device(record.device); }
  cudaError_t const result = pool->try_deallocate_async(ptr, allocation_stream(s.settings));
  if (current != record.device) { (void)rt.set_device(current); }
  return result;
}

// Observe mode: the native allocator serves everything; with statistics on,
// the sizes are recorded so frees can be counted.
cudaError_t observe_allocation(shim_state& s, runtime_functions const& rt, void** dev_ptr, std::size_t size,
                               timed_call& timer) noexcept
{
  cudaError_t const result = rt.malloc(dev_ptr, size);
  if (!s.stats) { return result; }
  if (rt.get_device(&timer.device) != cudaSuccess) { timer.device = statistics::unattributed; }
  if (result != cudaSuccess) {
    s.stats->allocation_failed(timer.device);
    return result;
  }
  try {
    s.registry.insert(*dev_ptr, allocation_record{size, timer.device});
    s.stats->allocation_served(timer.device, size);
  } catch (std::bad_alloc const&) {  // the program keeps its memory; the count misses it
  }
  return result;
}

}  // namespace

cudaError_t allocate(void** dev_ptr, std::size_t size, void const* caller) noexcept
{
  auto const& rt = runtime(caller);
  if (!rt.found()) { return runtime_missing_error; }
  if (process_settings().disabled) { return rt.malloc(dev_ptr, size); }

  shim_state& s = state();
  timed_call timer{s.stats, interposed_call::malloc};
  // The native call keeps exactly its own results for what the pool does not serve.
  if (dev_ptr == nullptr || size == 0) {
    count_passthrough(s, statistics::unattributed, passthrough_reason::zero_size_or_null);
    return rt.malloc(dev_ptr, size);
  }
  if (s.settings.mode == config::shim_mode::observe) {
    cudaError_t const result = observe_allocation(s, rt, dev_ptr, size, timer);
    arm_report(s);
    return result;
  }

  if (rt.get_device(&timer.device) != cudaSuccess) {
    timer.device = statistics::unattributed;
    count_passthrough(s, statistics::unattributed, passthrough_reason::no_current_device);
    return rt.malloc(dev_ptr, size);
  }
  cuda_async_memory_resource* pool = s.pools.get(timer.device);
  arm_report(s);
  if (pool == nullptr) {
    count_passthrough(s, timer.device, passthrough_reason::pool_unavailable);
    return rt.malloc(dev_ptr, size);
  }

  void* ptr = nullptr;
  cudaError_t const result = pool->try_allocate_async(&ptr, size, allocation_stream(s.settings));
  if (result != cudaSuccess) {
    if (s.stats) { s.stats->allocation_failed(timer.device); }
    log::debug("cudaMalloc({}) on device {}: the pool returned {}", size, timer.device, rt.get_error_name(result));
    return result;
  }
  try {
    s.registry.insert(ptr, allocation_record{size, timer.device});
  } catch (std::bad_alloc const&) {
    (void)pool->try_deallocate_async(ptr, allocation_stream(s.settings));
    if (s.stats) { s.stats->allocation_failed(timer.device); }
    return cudaErrorMemoryAllocation;
  }
  if (s.stats) { s.stats->allocation_served(timer.device, size); }
  *dev_ptr = ptr;
  log::trace("cudaMalloc({}) on device {} -> {}", size, timer.device, ptr);
  return cudaSuccess;
}

cudaError_t deallocate(void* ptr, void const* caller) noexcept
{
  auto const& rt = runtime(caller);
  if (!rt.found()) { return runtime_missing_error; }
  if (process_settings().disabled) { return rt.free(ptr); }

  shim_state& s = state();
  timed_call timer{s.stats, interposed_call::free};
  auto const record = ptr != nullptr ? s.registry.take(ptr) : std::nullopt;
  if (!record) {
    // Not ours (nullptr, memory from before the shim was active or from another
    // path, not device memory at all): the native cudaFree gives the native answer.
    if (s.stats) { s.stats->free_passed_through(); }
    cudaError_t const result = rt.free(ptr);
    arm_report(s);
    return result;
  }
  timer.device = record->device;
  cudaError_t const result = s.settings.mode == config::shim_mode::observe ? rt.free(ptr)
                                                                           : free_to_pool(s, ptr, *record);
  if (s.stats && result == cudaSuccess) { s.stats->free_served(record->device, record->bytes); }
  log::trace("cudaFree({}) on device {} ({} bytes)", ptr, record->device, record->bytes);
  return result;
}

}  // namespace asyncshim::shim
