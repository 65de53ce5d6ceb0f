#include "allocator.hpp"

#include "allocation_registry.hpp"
#include "device_pools.hpp"
#include "log.hpp"
#include "process_settings.hpp"
#include "runtime_binding.hpp"
#include "statistics.hpp"
#include "stats_report.hpp"

#include <pthread.h>

#include <atomic>
#include <new>

namespace asyncshim::shim {
namespace {

// Set in a child made by fork (without exec): it passes everything through,
// so it never waits on a lock another parent thread held at the fork and
// never touches the parent's pools. Constant-initialized: no load-time code.
std::atomic<bool> in_forked_child{false};

void mark_forked_child() { in_forked_child.store(true, std::memory_order_relaxed); }

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

// The state, or null when the shim must pass the call through untouched: it
// is disabled, this is a forked child, or there is no memory for the state.
shim_state* active_state() noexcept
{
  if (in_forked_child.load(std::memory_order_relaxed) || process_settings().disabled) { return nullptr; }
  static shim_state* const instance = []() noexcept {
    auto* made = new (std::nothrow) shim_state{process_settings()};
    if (made != nullptr) { pthread_atfork(nullptr, nullptr, mark_forked_child); }
    return made;
  }();
  return instance;
}

// After a call into the program's runtime (so the exit handler runs before
// the runtime's own teardown).
void arm_report(shim_state& s) noexcept
{
  if (s.stats != nullptr) { report_at_exit(s.sources); }
}

cudaStream_t allocation_stream(config::settings const& settings) noexcept
{
  return settings.stream == config::stream_choice::per_thread ? cudaStreamPerThread : cudaStreamLegacy;
}

void count_passthrough(shim_state& s, int device, passthrough_reason reason) noexcept
{
  if (s.stats != nullptr) { s.stats->allocation_passed_through(device, reason); }
}

void count_failure(shim_state& s, int device) noexcept
{
  if (s.stats != nullptr) { s.stats->allocation_failed(device); }
}

// Frees a pool pointer on the stream of the device that owns it, making that
// device current for the call when it is not.
cudaError_t free_to_pool(shim_state& s, void* ptr, allocation_record const& record) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(record.device);
  if (pool == nullptr) { return cudaErrorInvalidValue; }  // cannot happen: records exist only for pools
  auto const& rt = runtime();
  int current = record.device;
  if (rt.get_device(&current) != cudaSuccess) { current = record.device; }
  if (current != record.device) {
    if (cudaError_t const error = rt.set_device(record.device); error != cudaSuccess) { return error; }
  }
  cudaError_t const result = pool->try_deallocate_async(ptr, allocation_stream(s.settings));
  if (current != record.device) { (void)rt.set_device(current); }
  return result;
}

// Observe mode: the native allocator serves everything; with statistics on,
// sizes are recorded so that frees can be counted.
cudaError_t observe_allocation(shim_state& s, runtime_functions const& rt, void** dev_ptr, std::size_t size,
                               timed_call& timer) noexcept
{
  cudaError_t const result = rt.malloc(dev_ptr, size);
  if (s.stats == nullptr) { return result; }
  if (rt.get_device(&timer.device) != cudaSuccess) { timer.device = statistics::unattributed; }
  if (result != cudaSuccess) {
    count_failure(s, timer.device);
    return result;
  }
  try {
    s.registry.insert(*dev_ptr, allocation_record{size, timer.device});
    s.stats->allocation_served(timer.device, size);
  } catch (...) {  // the program keeps its memory; only the count misses it
  }
  return result;
}

cudaError_t pool_allocation(shim_state& s, runtime_functions const& rt, void** dev_ptr, std::size_t size,
                            timed_call& timer) noexcept
{
  if (rt.get_device(&timer.device) != cudaSuccess) {
    timer.device = statistics::unattributed;
    count_passthrough(s, statistics::unattributed, passthrough_reason::no_current_device);
    return rt.malloc(dev_ptr, size);
  }
  cuda_async_memory_resource* pool = s.pools.get(timer.device);
  if (pool == nullptr) {
    count_passthrough(s, timer.device, passthrough_reason::pool_unavailable);
    return rt.malloc(dev_ptr, size);
  }

  void* ptr = nullptr;
  cudaError_t const result = pool->try_allocate_async(&ptr, size, allocation_stream(s.settings));
  if (result != cudaSuccess) {
    *dev_ptr = nullptr;  // as a failed native cudaMalloc leaves it
    count_failure(s, timer.device);
    if (log::enabled(log::log_level::debug)) {
      log::debug("cudaMalloc({}) on device {}: the pool returned {}", size, timer.device, rt.get_error_name(result));
    }
    return result;
  }
  try {
    s.registry.insert(ptr, allocation_record{size, timer.device});
  } catch (...) {  // no host memory for the record: give the block back
    (void)pool->try_deallocate_async(ptr, allocation_stream(s.settings));
    *dev_ptr = nullptr;
    count_failure(s, timer.device);
    return cudaErrorMemoryAllocation;
  }
  if (s.stats != nullptr) { s.stats->allocation_served(timer.device, size); }
  *dev_ptr = ptr;
  log::trace("cudaMalloc({}) on device {} -> {}", size, timer.device, ptr);
  return cudaSuccess;
}

}  // namespace

cudaError_t allocate(void** dev_ptr, std::size_t size, void const* caller) noexcept
{
  auto const& rt = runtime(caller);
  if (!rt.found()) { return runtime_missing_error; }
  shim_state* s = active_state();
  if (s == nullptr) { return rt.malloc(dev_ptr, size); }

  cudaError_t result = cudaSuccess;
  {
    timed_call timer{s->stats, interposed_call::malloc};
    if (dev_ptr == nullptr || size == 0) {  // the native call keeps its own semantics
      count_passthrough(*s, statistics::unattributed, passthrough_reason::zero_size_or_null);
      result = rt.malloc(dev_ptr, size);
    } else if (s->settings.mode == config::shim_mode::observe) {
      result = observe_allocation(*s, rt, dev_ptr, size, timer);
    } else {
      result = pool_allocation(*s, rt, dev_ptr, size, timer);
    }
  }
  arm_report(*s);
  return result;
}

cudaError_t deallocate(void* ptr, void const* caller) noexcept
{
  auto const& rt = runtime(caller);
  if (!rt.found()) { return runtime_missing_error; }
  shim_state* s = active_state();
  if (s == nullptr) { return rt.free(ptr); }

  cudaError_t result = cudaSuccess;
  {
    timed_call timer{s->stats, interposed_call::free};
    auto const record = ptr != nullptr ? s->registry.take(ptr) : std::nullopt;
    if (!record) {
      // Not ours (nullptr, memory from before the shim was active or from
      // another path, not device memory): the native cudaFree answers.
      if (s->stats != nullptr) { s->stats->free_passed_through(); }
      result = rt.free(ptr);
    } else {
      timer.device = record->device;
      result = s->settings.mode == config::shim_mode::observe ? rt.free(ptr) : free_to_pool(*s, ptr, *record);
      if (s->stats != nullptr && result == cudaSuccess) { s->stats->free_served(record->device, record->bytes); }
      log::trace("cudaFree({}) on device {} ({} bytes)", ptr, record->device, record->bytes);
    }
  }
  arm_report(*s);
  return result;
}

}  // namespace asyncshim::shim
