// What the interposed allocation entry points do, at both API levels:
// cudaMalloc/cudaFree (runtime) and cuMemAlloc_v2/cuMemFree_v2 (driver). Both
// use the same pools and the same ownership record, so memory from either can
// be freed through the other. entry_points.cpp and driver_entry_points.cpp
// only forward here.
#include "allocator.hpp"

#include "allocation_registry.hpp"
#include "call_context.hpp"
#include "device_pools.hpp"
#include "driver_binding.hpp"
#include "driver_interception.hpp"
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

// One API level's native calls, in runtime terms (CUresult codes equal the
// cudaError_t codes, CUdeviceptr is a pointer-sized integer).
struct native_api {
  api_level level;
  interposed_call alloc_call;
  interposed_call free_call;
  cudaError_t (*malloc)(void** ptr, std::size_t size);
  cudaError_t (*free)(void* ptr);
  cudaError_t (*current_device)(int* device);
};

native_api const runtime_api{
  api_level::runtime, interposed_call::malloc, interposed_call::free,
  [](void** p, std::size_t n) { return runtime().malloc(p, n); },
  [](void* p) { return runtime().free(p); },
  [](int* d) { return runtime().get_device(d); },
};

native_api const driver_api{
  api_level::driver, interposed_call::driver_malloc, interposed_call::driver_free,
  [](void** p, std::size_t n) {
    return static_cast<cudaError_t>(driver().mem_alloc(reinterpret_cast<CUdeviceptr*>(p), n));
  },
  [](void* p) { return static_cast<cudaError_t>(driver().mem_free(reinterpret_cast<CUdeviceptr>(p))); },
  [](int* d) { return static_cast<cudaError_t>(driver().ctx_get_device(d)); },
};

// After a call into CUDA (so the exit handler runs before the runtime's own teardown).
void arm_report(shim_state& s) noexcept
{
  if (s.stats != nullptr) { report_at_exit(s.sources); }
}

cudaStream_t allocation_stream(config::settings const& settings) noexcept
{
  // Equal to CU_STREAM_PER_THREAD / CU_STREAM_LEGACY at the driver level.
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

// Makes the device that owns a block current for its free, then puts back
// what was current: the runtime's device, or at the driver level the exact
// context (which may be one the program made itself).
class owner_device_scope {
 public:
  owner_device_scope(api_level level, int owner) noexcept : level_{level}
  {
    if (level_ == api_level::driver) {
      // The owner's primary context is pushed for the free and popped after,
      // so the context stack is left exactly as it was; the retain is
      // released again.
      auto const& drv = driver();
      int device = owner;
      if (drv.ctx_get_device(&device) != CUDA_SUCCESS || device == owner) { return; }
      CUcontext primary = nullptr;
      status_ = static_cast<cudaError_t>(drv.device_primary_ctx_retain(&primary, owner));
      if (status_ != cudaSuccess) { return; }
      owner_ = owner;
      status_ = static_cast<cudaError_t>(drv.ctx_push_current(primary));
      switched_ = status_ == cudaSuccess;
      if (!switched_) { (void)drv.device_primary_ctx_release(owner); }
      return;
    }
    auto const& rt = runtime();
    if (rt.get_device(&previous_device_) != cudaSuccess || previous_device_ == owner) { return; }
    status_ = rt.set_device(owner);
    switched_ = status_ == cudaSuccess;
  }

  ~owner_device_scope()
  {
    if (!switched_) { return; }
    if (level_ == api_level::driver) {
      CUcontext popped = nullptr;
      (void)driver().ctx_pop_current(&popped);
      (void)driver().device_primary_ctx_release(owner_);
    } else {
      (void)runtime().set_device(previous_device_);
    }
  }

  owner_device_scope(owner_device_scope const&) = delete;
  owner_device_scope& operator=(owner_device_scope const&) = delete;

  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  api_level level_;
  int previous_device_ = 0;
  int owner_ = 0;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

cudaError_t free_to_pool(shim_state& s, api_level level, void* ptr, allocation_record const& record) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(record.device);
  if (pool == nullptr) { return cudaErrorInvalidValue; }  // cannot happen: records exist only for pools
  owner_device_scope owner{level, record.device};
  if (owner.status() != cudaSuccess) { return owner.status(); }
  return pool->try_deallocate_async(ptr, allocation_stream(s.settings));
}

// Observe mode: the native allocator serves everything; with statistics on,
// sizes are recorded so that frees can be counted.
cudaError_t observe_allocation(shim_state& s, native_api const& api, void** dev_ptr, std::size_t size,
                               timed_call& timer) noexcept
{
  cudaError_t const result = api.malloc(dev_ptr, size);
  if (s.stats == nullptr) { return result; }
  if (api.current_device(&timer.device) != cudaSuccess) { timer.device = statistics::unattributed; }
  if (result != cudaSuccess) {
    count_failure(s, timer.device);
    return result;
  }
  try {
    s.registry.insert(*dev_ptr, allocation_record{size, timer.device});
    s.stats->allocation_served(timer.device, size, api.alloc_call);
  } catch (...) {  // the program keeps its memory; only the count misses it
  }
  return result;
}

cudaError_t pool_allocation(shim_state& s, native_api const& api, void** dev_ptr, std::size_t size,
                            timed_call& timer) noexcept
{
  if (api.current_device(&timer.device) != cudaSuccess) {
    timer.device = statistics::unattributed;
    count_passthrough(s, statistics::unattributed, passthrough_reason::no_current_device);
    return api.malloc(dev_ptr, size);
  }
  cuda_async_memory_resource* pool = s.pools.get(timer.device);
  if (pool == nullptr) {
    count_passthrough(s, timer.device, passthrough_reason::pool_unavailable);
    return api.malloc(dev_ptr, size);
  }

  void* ptr = nullptr;
  cudaError_t const result = pool->try_allocate_async(&ptr, size, allocation_stream(s.settings));
  if (result != cudaSuccess) {
    *dev_ptr = nullptr;  // as a failed native allocation leaves it
    count_failure(s, timer.device);
    if (log::enabled(log::log_level::debug)) {
      log::debug("{}({}) on device {}: the pool returned error {}", to_string(api.alloc_call), size, timer.device,
                 static_cast<int>(result));
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
  if (s.stats != nullptr) { s.stats->allocation_served(timer.device, size, api.alloc_call); }
  *dev_ptr = ptr;
  log::trace("{}({}) on device {} -> {}", to_string(api.alloc_call), size, timer.device, ptr);
  return cudaSuccess;
}

// The state when `api`'s level is intercepted for this call; null to pass it through.
shim_state* intercepting(native_api const& api) noexcept
{
  // A driver call made by the runtime inside an intercepted runtime call
  // (the runtime's own cudaMalloc, when the shim passed one through) is
  // never intercepted a second time.
  if (api.level == api_level::driver && current_api_level() == api_level::runtime) { return nullptr; }
  shim_state* s = active_state();
  if (s == nullptr) { return nullptr; }
  bool const wanted = api.level == api_level::runtime ? s->settings.intercepts_runtime()
                                                      : s->settings.intercepts_driver();
  return wanted ? s : nullptr;
}

cudaError_t allocate_with(native_api const& api, void** dev_ptr, std::size_t size) noexcept
{
  shim_state* s = intercepting(api);
  if (s == nullptr) { return api.malloc(dev_ptr, size); }

  api_level_scope level{api.level};
  cudaError_t result = cudaSuccess;
  {
    timed_call timer{s->stats, api.alloc_call};
    if (dev_ptr == nullptr || size == 0) {  // the native call keeps its own semantics
      count_passthrough(*s, statistics::unattributed, passthrough_reason::zero_size_or_null);
      result = api.malloc(dev_ptr, size);
    } else if (s->settings.mode == config::shim_mode::observe) {
      result = observe_allocation(*s, api, dev_ptr, size, timer);
    } else {
      result = pool_allocation(*s, api, dev_ptr, size, timer);
    }
  }
  arm_report(*s);
  return result;
}

cudaError_t deallocate_with(native_api const& api, void* ptr) noexcept
{
  shim_state* s = intercepting(api);
  if (s == nullptr) { return api.free(ptr); }

  api_level_scope level{api.level};
  cudaError_t result = cudaSuccess;
  {
    timed_call timer{s->stats, api.free_call};
    auto const record = ptr != nullptr ? s->registry.take(ptr) : std::nullopt;
    if (!record) {
      // Not ours (null, memory from before the shim was active or from
      // another path, not device memory): the native call answers.
      if (s->stats != nullptr) { s->stats->free_passed_through(); }
      result = api.free(ptr);
    } else {
      timer.device = record->device;
      result = s->settings.mode == config::shim_mode::observe ? api.free(ptr)
                                                              : free_to_pool(*s, api.level, ptr, *record);
      if (result != cudaSuccess) {
        // Still allocated (e.g. no current context at the driver level, as
        // natively an error): keep it ours, so a retry frees it to the pool.
        try {
          s->registry.insert(ptr, *record);
        } catch (...) {
        }
      } else if (s->stats != nullptr) {
        s->stats->free_served(record->device, record->bytes);
      }
      log::trace("{}({}) on device {} ({} bytes)", to_string(api.free_call), ptr, record->device, record->bytes);
    }
  }
  arm_report(*s);
  return result;
}

}  // namespace

cudaError_t allocate(void** dev_ptr, std::size_t size, void const* caller) noexcept
{
  if (!runtime(caller).found()) { return runtime_missing_error; }
  return allocate_with(runtime_api, dev_ptr, size);
}

cudaError_t deallocate(void* ptr, void const* caller) noexcept
{
  if (!runtime(caller).found()) { return runtime_missing_error; }
  return deallocate_with(runtime_api, ptr);
}

CUresult driver_allocate(CUdeviceptr* dptr, std::size_t bytes) noexcept
{
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  return static_cast<CUresult>(allocate_with(driver_api, reinterpret_cast<void**>(dptr), bytes));
}

CUresult driver_deallocate(CUdeviceptr ptr) noexcept
{
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  return static_cast<CUresult>(deallocate_with(driver_api, reinterpret_cast<void*>(ptr)));
}

bool driver_interception_active() noexcept
{
  if (in_forked_child.load(std::memory_order_relaxed)) { return false; }
  config::settings const& settings = process_settings();
  return !settings.disabled && settings.intercepts_driver();
}

}  // namespace asyncshim::shim
