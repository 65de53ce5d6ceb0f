// What the interposed allocation entry points do, at both API levels:
// cudaMalloc/cudaFree (runtime) and cuMemAlloc_v2/cuMemFree_v2 (driver), and
// the pitched cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch_v2, served as
// a block of pitch × rows bytes with the native pitch (cuda/pitch_rule.hpp).
// All use the same pools (state/device_pools.hpp) and the same ownership
// record, so memory from any can be freed through the other level. The
// exports (abi/) only forward here.
#include "core/deferred_frees.hpp"
#include "core/followed_submissions.hpp"
#include "core/hooks.hpp"
#include "core/lookup_redirect.hpp"
#include "core/memory_limit.hpp"
#include "core/memory_release.hpp"
#include "core/metrics_file.hpp"
#include "core/observed_blocks.hpp"
#include "core/out_of_memory.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "cuda/pitch_rule.hpp"
#include "cuda/runtime.hpp"
#include "state/allocation_registry.hpp"
#include "state/device_pools.hpp"
#include "state/leak_report.hpp"
#include "state/shim_state.hpp"
#include "state/statistics.hpp"
#include "state/stream_tracker.hpp"
#include "support/log.hpp"

#include <cstdint>
#include <optional>

namespace asyncshim::shim {
namespace {

// One API level's native calls, in runtime terms (CUresult codes equal the
// cudaError_t codes, CUdeviceptr is a pointer-sized integer).
struct native_api : native_calls {
  api_level level;
  interposed_call alloc_call;
  interposed_call free_call;
  cudaError_t (*current_device)(int* device);
  bool texture_aligned = false;  ///< its blocks' bases are aligned as the device's textures need (pitched calls)
};

constexpr native_api runtime_api{
  {[](void** p, std::size_t n) { return runtime().malloc(p, n); }, [](void* p) { return runtime().free(p); }},
  api_level::runtime,
  interposed_call::malloc,
  interposed_call::free,
  [](int* d) { return runtime().get_device(d); },
};

constexpr native_api driver_api{
  {[](void** p, std::size_t n) {
     return static_cast<cudaError_t>(driver().mem_alloc(reinterpret_cast<CUdeviceptr*>(p), n));
   },
   [](void* p) { return static_cast<cudaError_t>(driver().mem_free(reinterpret_cast<CUdeviceptr>(p))); }},
  api_level::driver,
  interposed_call::driver_malloc,
  interposed_call::driver_free,
  [](int* d) { return static_cast<cudaError_t>(driver().ctx_get_device(d)); },
};

// The same levels, for the pitched entry points (counted under their own names).
constexpr native_api pitched(native_api api, interposed_call call) noexcept
{
  api.alloc_call = call;
  api.texture_aligned = true;
  return api;
}
constexpr native_api runtime_pitch_api = pitched(runtime_api, interposed_call::malloc_pitch);
constexpr native_api runtime_3d_api = pitched(runtime_api, interposed_call::malloc_3d);
constexpr native_api driver_pitch_api = pitched(driver_api, interposed_call::driver_malloc_pitch);

// What hand_out() answers for a block whose base is not aligned as a pitched
// block's must be (the pool promises 256 bytes; textures need the device's
// texture alignment): the block went back to the pool, and the pitched call
// asks the native one. Never returned to the program.
constexpr cudaError_t misaligned_block = cudaErrorMisalignedAddress;

cudaStream_t allocation_stream(config::settings const& settings) noexcept
{
  // Equal to CU_STREAM_PER_THREAD / CU_STREAM_LEGACY at the driver level.
  return settings.stream == config::stream_choice::per_thread ? cudaStreamPerThread : cudaStreamLegacy;
}

// The stream an event of the program's is logged with: the one the shim
// allocates on for it (the legacy or the per-thread default stream).
// Numbered as RMM's replay reads them: 0, or 2 (cudaStreamPerThread).
std::uintptr_t logged_stream(shim_state const& s) noexcept
{
  return s.settings.stream == config::stream_choice::per_thread ? reinterpret_cast<std::uintptr_t>(cudaStreamPerThread)
                                                                : 0;
}

void note_failed(shim_state& s, std::size_t size) noexcept
{
  if (s.events != nullptr) { log_event(*s.events, event_action::allocate_failure, nullptr, size, logged_stream(s)); }
}

void count_passthrough(shim_state& s, int device, passthrough_reason reason) noexcept
{
  if (s.stats != nullptr) { s.stats->allocation_passed_through(device, reason); }
  // Zero-size and null requests allocate nothing that could leak.
  if (s.leaks != nullptr && reason != passthrough_reason::zero_size_or_null) { s.leaks->passed_through(); }
}

void count_failure(shim_state& s, int device) noexcept
{
  if (s.stats != nullptr) { s.stats->allocation_failed(device); }
}

// The resource's pool calls made at the driver level where a context is
// current: the runtime then keeps no error of the shim's own attempts. A
// failure is repeated at the caller's level, so that it leaves the error the
// native call would have left (cudaGetLastError). The caller says whether a
// context is current (it has made sure of it, or found none).
template <class Attempt>
cudaError_t quietly_then_at_caller_level(api_level level, bool context_current, Attempt attempt) noexcept
{
  if (level == api_level::driver) { return attempt(); }
  if (context_current) {
    api_level_scope quiet{api_level::driver};
    if (attempt() == cudaSuccess) { return cudaSuccess; }
  }
  return attempt();
}

// What native cudaFree does when a capture forbids it: fail with the
// capture's error and invalidate the capture. A native one-byte allocation
// fails in exactly that way; should it succeed (the capture rules said
// otherwise), it is given back and the free is queued.
cudaError_t free_during_forbidding_capture(shim_state& s, native_api const& api, void* ptr,
                                           allocation_record const& record) noexcept
{
  void* probe = nullptr;
  cudaError_t const native = api.malloc(&probe, 1);
  if (native != cudaSuccess) { return native; }
  (void)api.free(probe);
  return queue_free(s, ptr, record, true);
}

// Gives `ptr` to the pool on `stream` now, the owner's context current, with
// the calls of API level `level` (a runtime-level free is tried at the driver
// level first, quietly). The record goes before the pool has the block
// (state/allocation_registry.hpp), and comes back, claimed, if the free fails
// (for pool_free's unclaim, or a queue that tries again).
// `record_kept`, if given, says whether a failed free's record is back.
cudaError_t release_to_pool(shim_state& s, api_level level, cuda_async_memory_resource& pool, void* ptr,
                            CUstream stream, bool* record_kept = nullptr) noexcept
{
  std::optional<allocation_record> const claimed = s.registry.take_freed(ptr);
  api_level_scope at_level{level};
  cudaError_t const r = quietly_then_at_caller_level(
    level, true, [&] { return pool.try_deallocate_async(ptr, reinterpret_cast<cudaStream_t>(stream)); });
  bool const kept = r != cudaSuccess && claimed && s.registry.put_back(ptr, *claimed);
  if (record_kept != nullptr) { *record_kept = kept; }
  return r;
}

// A free in the legacy stream's order (stream_tracker::free_in_order): kept
// for the next allocation of its size when the reuse cache has room (its
// record stays, freed, so that a second free is still a double free),
// otherwise to the pool on the legacy stream. A kept block still has an
// action on the legacy stream, as the pool's free would be: an event record
// there waits for the blocking streams' work before it, and their later
// work waits for it: blocking streams are ordered only through the legacy
// stream, so a kept block with no action there could be handed to a new
// owner while a blocking stream still uses it. `barrier_recorded`: the
// tracker has just recorded the pool's barrier there, which is that action.
// `to_pool` counts the bytes that went to the pool: the block when the cache
// does not keep it, else the thread's older blocks it took the room of. The
// cache keeps only sizes the program allocates again (state/recurring_sizes.hpp).
cudaError_t free_in_legacy_order(shim_state& s, cuda_async_memory_resource& pool, void* ptr,
                                 allocation_record const& record, bool barrier_recorded, bool* record_kept,
                                 std::size_t& to_pool) noexcept
{
  if (reuses_blocks(s, record.device) && s.recurring.recurring(record.bytes)) {
    auto const record_event = driver().event_record;
    CUevent const barrier = s.pools.streams(record.device).in_order_barrier;
    if ((barrier_recorded || (record_event != nullptr && record_event(barrier, CU_STREAM_LEGACY) == CUDA_SUCCESS)) &&
        keep_freed_in_order(s, record.device, ptr, record.bytes, to_pool)) {
      return cudaSuccess;
    }
  }
  to_pool += record.bytes;
  return release_to_pool(s, api_level::driver, pool, ptr, CU_STREAM_LEGACY, record_kept);
}

cudaError_t free_on_stream(shim_state& s, native_api const& api, cuda_async_memory_resource& pool, void* ptr,
                           allocation_record const& record, CUstream stream) noexcept
{
  cudaError_t const r = release_to_pool(s, api.level, pool, ptr, stream);
  if (r == cudaSuccess) { note_freed(s, record.device, record.bytes, stream); }
  return r;
}

// A free made while a capture is in progress, whatever the ordering: queued
// when the capture rules allow the calling thread a free (issued with the
// device ordering's fence once no capture is in progress: the thread issuing
// it is not the one that freed, so its own stream means nothing to the
// program's work), else failing as the native call does. The caller holds
// `access`, which this gives up.
cudaError_t free_during_capture(shim_state& s, native_api const& api, stream_tracker::shared_access& access, void* ptr,
                                allocation_record const& record) noexcept
{
  bool const prohibited = tracker().calling_thread_is_prohibited();
  access.unlock();
  return prohibited ? free_during_forbidding_capture(s, api, ptr, record) : queue_free(s, ptr, record, true);
}

// Path 1 of device ordering (core/deferred_frees.hpp): in the legacy
// stream's order, while no non-blocking stream that may use the block has
// work in progress (stream_tracker::free_in_order). True when the free is
// over: made (`result` cudaSuccess), or failed with its record gone (the
// queue could not issue it). Under the tracker's locks only the driver's
// free: no runtime call (which may make streams of its own), no look at the
// device's memory. A block exported through legacy IPC never goes in order:
// the next allocation on the legacy stream would get it at once, while a
// process that opened it may still read it (natively it keeps the bytes).
bool freed_in_order(shim_state& s, cuda_async_memory_resource& pool, void* ptr, allocation_record const& record,
                    bool exported, cudaError_t& result) noexcept
{
  stream_tracker& streams = tracker();
  if (exported || !s.settings.frees_in_order() || !streams.frees_may_go_in_order()) { return false; }
  // Held through the look at the device's memory after the free, which may
  // give memory back (no capture may begin meanwhile either).
  auto access = streams.access();
  device_streams const& pool_streams = s.pools.streams(record.device);
  bool record_kept = true;
  std::size_t to_pool = 0;
  auto const free_on_legacy = [&](bool barrier_recorded) {
    return free_in_legacy_order(s, pool, ptr, record, barrier_recorded, &record_kept, to_pool);
  };
  if (!streams.free_in_order(pool_streams.context, pool_streams.in_order_barrier, record.handed_out, free_on_legacy,
                             result)) {
    return false;
  }
  if (result == cudaSuccess) {
    if (s.stats != nullptr) { s.stats->free_in_order(record.device); }
    // A kept block leaves the pool's unused memory as it was (the cache's is bounded).
    if (to_pool > 0) { note_freed(s, record.device, to_pool, CU_STREAM_LEGACY); }
    return true;
  }
  return !record_kept;  // should the free have failed with its record kept, the queue tries again
}

// Path 2 of device ordering, and path 3 inside it (core/deferred_frees.hpp):
// fenced. In the pool's context the free is queued and issued behind one
// fence with the rest of its batch (issue_queued); during a capture it waits
// for the capture's end; in another context (a driver-API program's own, or
// another device current) it is fenced and freed at once, as the fence must
// be recorded where the program worked. Where no fence can cover every user
// of the block, fence_or_synchronize waits on the host instead.
cudaError_t free_fenced(shim_state& s, native_api const& api, cuda_async_memory_resource& pool, void* ptr,
                        allocation_record const& record, bool in_pool_context_without_capture) noexcept
{
  if (in_pool_context_without_capture) { return queue_free(s, ptr, record, false); }
  stream_tracker& streams = tracker();
  auto access = streams.access();
  if (streams.captures_in_progress()) { return free_during_capture(s, api, access, ptr, record); }
  owner_device_scope owner{api.level, record.device};
  if (owner.status() != cudaSuccess) { return owner.status(); }
  // The owner's context is current now (cudaSetDevice makes it so).
  if (cudaError_t const r = fence_or_synchronize(s, record.device, api.level); r != cudaSuccess) { return r; }
  return free_on_stream(s, api, pool, ptr, record, s.pools.streams(record.device).own);
}

// Frees `ptr`, claimed in the ownership record, as the configured ordering
// says:
//  - device: in order, else fenced (and waited for where no fence covers
//    every user of the block): the three paths of core/deferred_frees.hpp;
//  - stream: on the allocation stream of the calling thread, at once;
//  - sync: after a device synchronization, on the shim's own stream.
// During a capture, frees are deferred whatever the ordering
// (free_during_capture). A block freed at once has its record released once
// the pool has it.
cudaError_t free_to_pool(shim_state& s, native_api const& api, void* ptr, allocation_record const& record,
                         bool exported) noexcept
{
  cuda_async_memory_resource* pool = s.pools.existing(record.device);
  if (pool == nullptr) { return cudaErrorInvalidValue; }  // cannot happen: records exist only for pools
  stream_tracker& streams = tracker();
  if (s.settings.ordering == config::ordering_mode::device) {
    bool const in_pool = !streams.captures_in_progress() && in_pool_context(s, record.device);
    if (cudaError_t result = cudaSuccess; in_pool && freed_in_order(s, *pool, ptr, record, exported, result)) {
      return result;
    }
    return free_fenced(s, api, *pool, ptr, record, in_pool);
  }
  auto access = streams.access();
  if (streams.captures_in_progress()) { return free_during_capture(s, api, access, ptr, record); }
  owner_device_scope owner{api.level, record.device};
  if (owner.status() != cudaSuccess) { return owner.status(); }
  // The owner's context is current now (cudaSetDevice makes it so).
  if (s.settings.ordering == config::ordering_mode::stream) {
    return free_on_stream(s, api, *pool, ptr, record, reinterpret_cast<CUstream>(allocation_stream(s.settings)));
  }
  if (cudaError_t const r = synchronize_with_accessors(record.device, api.level); r != cudaSuccess) { return r; }
  return free_on_stream(s, api, *pool, ptr, record, s.pools.streams(record.device).own);
}

// Observe mode: a native allocation of `size` bytes, its `result`, recorded
// (with statistics, the leak report or the event log on).
void note_observed(shim_state& s, native_api const& api, void** dev_ptr, std::size_t size, timed_call& timer,
                   cudaError_t result) noexcept
{
  if (s.stats == nullptr && s.leaks == nullptr && s.events == nullptr) { return; }
  if (api.current_device(&timer.device) != cudaSuccess) { timer.device = statistics::unattributed; }
  if (result != cudaSuccess) {
    count_failure(s, timer.device);
    note_failed(s, size);
    return;
  }
  try {
    s.registry.insert(*dev_ptr, allocation_record{size, timer.device});
    if (s.stats != nullptr) { s.stats->allocation_served(timer.device, size, api.alloc_call); }
    note_allocated(s, *dev_ptr, size, timer.device, to_string(api.alloc_call), {logged_stream(s)});
  } catch (...) {  // the program keeps its memory; only the count misses it
  }
}

// Observe mode: the native allocator serves everything; with statistics or
// the leak report on, sizes are recorded so that frees can be counted.
cudaError_t observe_allocation(shim_state& s, native_api const& api, void** dev_ptr, std::size_t size,
                               timed_call& timer) noexcept
{
  if (wants_metrics_file(s)) { start_idle_release(s); }  // the thread that writes it
  cudaError_t result = cudaSuccess;
  if (s.limits.any() && api.current_device(&timer.device) == cudaSuccess) {
    result = native_allocation_within_limit(s, api, timer.device, dev_ptr, size);
  } else {
    result = api.malloc(dev_ptr, size);
  }
  note_observed(s, api, dev_ptr, size, timer, result);
  return result;
}

// Gives the program `ptr`, a block of `size` bytes from the pool of `device`
// (or from its reuse cache), once it is recorded as the program's.
cudaError_t hand_out(shim_state& s, native_api const& api, void** dev_ptr, void* ptr, std::size_t size, int device,
                     cuda_async_memory_resource& pool, cudaStream_t stream) noexcept
{
  if (api.texture_aligned) {
    std::optional<pitch_limits> const limits = pitch_limits_of(device);
    if (!limits || reinterpret_cast<std::uintptr_t>(ptr) % limits->alignment != 0) {
      (void)s.registry.take_freed(ptr);  // a block from the reuse cache is still claimed
      (void)pool.try_deallocate_async(ptr, stream);
      *dev_ptr = nullptr;
      return misaligned_block;
    }
  }
  try {
    s.registry.insert(ptr, allocation_record{size, device, false, tracker().block_handed_out()});
  } catch (...) {  // no host memory for the record: give the block back
    (void)pool.try_deallocate_async(ptr, stream);
    *dev_ptr = nullptr;
    count_failure(s, device);
    return cudaErrorMemoryAllocation;
  }
  if (s.stats != nullptr) { s.stats->allocation_served(device, size, api.alloc_call); }
  note_allocated(s, ptr, size, device, to_string(api.alloc_call), {logged_stream(s)});
  *dev_ptr = ptr;
  log::trace("{}({}) on device {} -> {}", to_string(api.alloc_call), size, device, ptr);
  return cudaSuccess;
}

cudaError_t pool_allocation(shim_state& s, native_api const& api, void** dev_ptr, std::size_t size, timed_call& timer,
                            void const* caller) noexcept
{
  // With a pool's context current, that pool's device is the runtime's
  // current device too (the runtime works in the current context): no need
  // to ask it, and no runtime call in the way of a fork (device_pools.hpp).
  CUcontext const context = current_context();
  timer.device = s.pools.device_of_context(context);
  if (timer.device < 0 && api.current_device(&timer.device) != cudaSuccess) {
    timer.device = statistics::unattributed;
    count_passthrough(s, statistics::unattributed, passthrough_reason::no_current_device);
    return api.malloc(dev_ptr, size);
  }
  // The shim's own pool calls go to the driver, which needs the device's
  // context current: the runtime makes it so on a thread's first call that
  // needs one, so do that now (the runtime's device stays the same).
  bool context_current = api.level == api_level::driver || context != nullptr;
  if (!context_current) { context_current = runtime().set_device(timer.device) == cudaSuccess && context_is_current(); }

  issue_urgent(s);
  stream_tracker& streams = tracker();
  auto access = streams.access();
  bool const during_capture = streams.captures_in_progress();
  // A pool is not made during a capture: making one uses the legacy stream,
  // which a capture may forbid. The native call answers meanwhile.
  cuda_async_memory_resource* pool = during_capture ? s.pools.existing(timer.device) : s.pools.get(timer.device);
  if (pool == nullptr) {
    access.unlock();
    count_passthrough(s, timer.device,
                      during_capture ? passthrough_reason::capture : passthrough_reason::pool_unavailable);
    return during_capture ? api.malloc(dev_ptr, size)
                          : native_allocation_within_limit(s, api, timer.device, dev_ptr, size);
  }
  start_idle_release(s);  // with the process's first pool
  if (!during_capture && s.settings.frees_in_order()) { check_runtime_submissions_followed(); }
  CUstream const own = s.pools.streams(timer.device).own;
  cudaStream_t stream = allocation_stream(s.settings);
  if (during_capture) {
    if (streams.calling_thread_is_prohibited()) {
      // The native call fails (and invalidates the capture) as natively.
      access.unlock();
      count_passthrough(s, timer.device, passthrough_reason::capture);
      return api.malloc(dev_ptr, size);
    }
    // The program's streams may be capturing: allocate on the shim's own.
    stream = reinterpret_cast<cudaStream_t>(own);
  }
  if (!during_capture && reuses_blocks(s, timer.device)) {
    if (void* reused = reused_block(s, timer.device, size)) {
      // Should it go back at once, then on the allocation stream: ordered
      // after the work before an in-order free too.
      return hand_out(s, api, dev_ptr, reused, size, timer.device, *pool, stream);
    }
    // A miss the pool cannot serve from the memory it has free would make it
    // grow: what the cache holds goes back first, so that the cache does not
    // make the pool reserve more than it would without it. Only while no
    // fenced batch is in flight (frees in order): blocks freed on the shim's
    // stream now could not serve this allocation before the device reaches
    // those frees, and the pool would grow all the same.
    if (s.reuse.holds_anything(timer.device) && s.reuse.oldest_in_flight(timer.device).done == nullptr &&
        usage_of(*pool).unused < size) {
      (void)return_cached_to_pool(s, timer.device);
    }
  }
  // Native blocks on this device too (rare: from before its pool) may take
  // the pool and them past the limit, which the pool's own bound cannot see;
  // a pool the driver would not bound is checked every time.
  bool const check_limit =
    s.limits.any() && (s.limits.native_bytes(timer.device) != 0 || s.pools.unbounded(timer.device));
  std::uint64_t const reserved_before = check_limit ? usage_of(*pool).reserved : 0;
  void* ptr = nullptr;
  held_back before_recovery;
  cudaError_t const result = quietly_then_at_caller_level(api.level, context_current, [&] {
    cudaError_t r = pool->try_allocate_async(&ptr, size, stream);
    // Only in the driver-level attempt, which leaves no error behind when the
    // second try succeeds.
    if (r == cudaErrorMemoryAllocation && current_api_level() == api_level::driver) {
      before_recovery = held_back_of(s, timer.device);
      recover_for_allocation(s, timer.device, *pool, own, during_capture);
      r = pool->try_allocate_async(&ptr, size, stream);
      if (s.stats != nullptr) { s.stats->oom_recovery(timer.device, r == cudaSuccess); }
    }
    return r;
  });
  if (result == cudaSuccess && during_capture && driver().stream_synchronize != nullptr) {
    (void)driver().stream_synchronize(own);  // the block is idle before the program sees it
  }
  // Refused only when it made the pool grow past what the limit leaves: what
  // the pool had reserved already is within it.
  if (result == cudaSuccess && check_limit && usage_of(*pool).reserved > reserved_before &&
      !pool_within_limit(s, timer.device, *pool)) {
    (void)pool->try_deallocate_async(ptr, stream);
    trim_pool_after(*pool, reinterpret_cast<CUstream>(stream));
    *dev_ptr = nullptr;
    count_failure(s, timer.device);
    note_failed(s, size);
    report_out_of_memory(s, {api.alloc_call, caller, size, timer.device}, *pool, before_recovery);
    return native_out_of_memory(api);
  }
  if (result != cudaSuccess) {
    *dev_ptr = nullptr;  // as a failed native allocation leaves it
    count_failure(s, timer.device);
    note_failed(s, size);
    if (result == cudaErrorMemoryAllocation) {
      report_out_of_memory(s, {api.alloc_call, caller, size, timer.device}, *pool, before_recovery);
    } else if (log::enabled(log::log_level::debug)) {
      log::debug("{}({}) on device {}: the pool returned {}", to_string(api.alloc_call), size, timer.device,
                 cuda_status{result});
    }
    return result;
  }
  return hand_out(s, api, dev_ptr, ptr, size, timer.device, *pool, stream);
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
  bool const wanted =
    api.level == api_level::runtime ? s->settings.intercepts_runtime() : s->settings.intercepts_driver();
  return wanted ? s : nullptr;
}

cudaError_t allocate_with(native_api const& api, void** dev_ptr, std::size_t size, void const* caller) noexcept
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
      result = pool_allocation(*s, api, dev_ptr, size, timer, caller);
    }
  }
  arm_exit_reports(*s);
  return result;
}

// A free of memory the shim did not hand out (null, memory from before the
// shim was active or from another path, not device memory): the native call
// answers.
// The error native cudaFree gives for a pointer it does not free, also
// left as the runtime's last error: the native free of an address that is
// certainly not device memory answers exactly that.
cudaError_t native_invalid_free(native_api const& api) noexcept
{
  static char const not_device_memory = 0;
  cudaError_t const r = api.free(const_cast<char*>(&not_device_memory));
  return r != cudaSuccess ? r : cudaErrorInvalidValue;
}

cudaError_t foreign_free(shim_state& s, native_api const& api, void* ptr) noexcept
{
  if (s.stats != nullptr) { s.stats->free_passed_through(); }
  // Natively memory opened from a legacy IPC handle is not freed by cudaFree
  // (cudaIpcCloseMemHandle unmaps it); the shim's imports would be.
  if (s.imports.contains(reinterpret_cast<std::uintptr_t>(ptr))) { return native_invalid_free(api); }
  // Pinned host memory is not freed by cudaFree; the driver would free a
  // block of the shim's host pool.
  if (s.host.blocks.containing(ptr)) { return native_invalid_free(api); }
  cudaError_t const result = api.free(ptr);
  if (result == cudaSuccess && ptr != nullptr) { native_block_freed(s, ptr); }
  return result;
}

// Observe mode: the native allocator freed it; the record only counts.
cudaError_t observe_free(shim_state& s, native_api const& api, void* ptr, timed_call& timer) noexcept
{
  auto const record = s.registry.take(ptr);  // none for null
  if (!record) { return foreign_free(s, api, ptr); }
  timer.device = record->device;
  std::optional<live_block> live = note_freeing(s, ptr, record->bytes, {logged_stream(s)});
  cudaError_t const result = api.free(ptr);
  if (result == cudaSuccess) { native_block_freed(s, ptr); }
  if (result != cudaSuccess) {
    note_free_failed(s, ptr, record->bytes, std::move(live), {logged_stream(s)});
    try {
      s.registry.insert(ptr, *record);
    } catch (...) {
    }
  } else if (s.stats != nullptr) {
    s.stats->free_served(record->device, record->bytes);
  }
  return result;
}

cudaError_t pool_free(shim_state& s, native_api const& api, void* ptr, timed_call& timer) noexcept
{
  allocation_record record;
  switch (s.registry.claim_for_free(ptr, record)) {
    case free_claim::not_found: return foreign_free(s, api, ptr);
    case free_claim::already_freed:
      // Freed already, its block not yet back in the pool: a double free.
      return native_invalid_free(api);
    case free_claim::claimed: break;
  }
  // Its legacy IPC handles name nothing from now on (before the pool may
  // hand the address out again); processes that opened it keep their mapping.
  bool const exported = s.exports.forget(reinterpret_cast<std::uintptr_t>(ptr));
  timer.device = record.device;
  std::optional<live_block> live = note_freeing(s, ptr, record.bytes, {logged_stream(s)});
  cudaError_t const result = free_to_pool(s, api, ptr, record, exported);
  if (result != cudaSuccess) {
    // Still allocated (e.g. no current context at the driver level, as
    // natively an error): the program's again, so a retry frees it.
    note_free_failed(s, ptr, record.bytes, std::move(live), {logged_stream(s)});
    s.registry.unclaim(ptr);
  } else if (s.stats != nullptr) {
    s.stats->free_served(record.device, record.bytes);
  }
  log::trace("{}({}) on device {} ({} bytes)", to_string(api.free_call), ptr, record.device, record.bytes);
  return result;
}

// A pitched block as the pool serves it: `rows` rows of the native pitch.
struct pitched_block {
  std::size_t pitch = 0;
  std::size_t bytes = 0;
};

// The block for rows of `width` bytes on the calling thread's device; none
// where the native call answers: an invalid request, no current device or
// context, a device whose pitch limits cannot be read, a width beyond the
// largest pitch, a size past what a size_t holds.
std::optional<pitched_block> pitched_block_for(native_api const& api, std::size_t width, std::size_t rows) noexcept
{
  int device = -1;
  if (width == 0 || rows == 0 || api.current_device(&device) != cudaSuccess) { return std::nullopt; }
  std::optional<pitch_limits> const limits = pitch_limits_of(device);
  if (!limits) { return std::nullopt; }
  std::optional<std::size_t> const pitch = native_pitch(width, *limits);
  if (!pitch || rows > SIZE_MAX / *pitch) { return std::nullopt; }
  return pitched_block{*pitch, *pitch * rows};
}

// A pitched request of `rows` rows of `width` bytes, intercepted. The native
// pitched call `native` (which writes *dev_ptr and *pitch) answers whatever
// the shim leaves alone, a block the pool could not give the alignment a
// pitched block needs, and observe mode (recorded as pitch × rows bytes).
// Otherwise a block of pitch × rows bytes is allocated as cudaMalloc's are
// (passed through, where it is, as a plain native allocation of that size).
template <class Native>
cudaError_t allocate_pitched(native_api const& api, void** dev_ptr, std::size_t* pitch, std::size_t width,
                             std::size_t rows, void const* caller, Native native) noexcept
{
  shim_state* s = intercepting(api);
  if (s == nullptr) { return native(); }
  bool const valid = dev_ptr != nullptr && pitch != nullptr && width != 0 && rows != 0;
  std::optional<pitched_block> const block = valid ? pitched_block_for(api, width, rows) : std::nullopt;
  bool const observed = valid && s->settings.mode == config::shim_mode::observe && !s->limits.any();
  cudaError_t result = misaligned_block;
  if (block && !observed) { result = allocate_with(api, dev_ptr, block->bytes, caller); }
  if (result != misaligned_block) {
    *pitch = block->pitch;  // a failed native call (out of memory) writes it too
    return result;
  }
  api_level_scope level{api.level};  // not intercepted again at the driver level
  {
    timed_call timer{s->stats, api.alloc_call};
    result = native();
    if (observed) {
      note_observed(*s, api, dev_ptr, result == cudaSuccess ? *pitch * rows : 0, timer, result);
    } else if (result == cudaSuccess || !valid) {
      count_passthrough(*s, statistics::unattributed,
                        valid ? passthrough_reason::pool_unavailable : passthrough_reason::zero_size_or_null);
    }
  }
  arm_exit_reports(*s);
  return result;
}

cudaError_t deallocate_with(native_api const& api, void* ptr) noexcept
{
  shim_state* s = intercepting(api);
  if (s == nullptr) {
    // A block of the host pool is refused at a level the shim does not intercept too (the driver would free it).
    shim_state* const listing = ptr != nullptr ? existing_state() : nullptr;
    if (listing != nullptr && listing->host.blocks.containing(ptr)) { return native_invalid_free(api); }
    return api.free(ptr);
  }

  api_level_scope level{api.level};
  cudaError_t result = cudaSuccess;
  {
    timed_call timer{s->stats, api.free_call};
    if (s->settings.mode == config::shim_mode::pool) { issue_urgent(*s); }
    if (s->settings.mode == config::shim_mode::observe) {
      result = observe_free(*s, api, ptr, timer);
    } else {
      result = pool_free(*s, api, ptr, timer);
    }
  }
  arm_exit_reports(*s);
  return result;
}

}  // namespace

}  // namespace asyncshim::shim

cudaError_t asyncshim_hook_malloc(void** devPtr, size_t size, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found()) { return runtime_missing_error; }
  return allocate_with(runtime_api, devPtr, size, caller);
}

cudaError_t asyncshim_hook_free(void* devPtr, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found()) { return runtime_missing_error; }
  return deallocate_with(runtime_api, devPtr);
}

CUresult asyncshim_hook_mem_alloc(CUdeviceptr* dptr, size_t bytesize) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  return static_cast<CUresult>(allocate_with(driver_api, reinterpret_cast<void**>(dptr), bytesize, nullptr));
}

cudaError_t asyncshim_hook_malloc_pitch(void** devPtr, size_t* pitch, size_t width, size_t height,
                                        void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().malloc_pitch == nullptr) { return runtime_missing_error; }
  return allocate_pitched(runtime_pitch_api, devPtr, pitch, width, height, caller,
                          [&] { return runtime().malloc_pitch(devPtr, pitch, width, height); });
}

cudaError_t asyncshim_hook_malloc_3d(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().malloc_3d == nullptr) { return runtime_missing_error; }
  auto const native = [&] { return runtime().malloc_3d(pitchedDevPtr, extent); };
  // A volume is depth × height rows, each of the pitch.
  if (pitchedDevPtr == nullptr || (extent.depth != 0 && extent.height > SIZE_MAX / extent.depth)) {
    return allocate_pitched(runtime_3d_api, nullptr, nullptr, 0, 0, caller, native);
  }
  void* ptr = nullptr;
  std::size_t pitch = 0;
  bool answered_natively = false;
  cudaError_t const result =
    allocate_pitched(runtime_3d_api, &ptr, &pitch, extent.width, extent.height * extent.depth, caller, [&] {
      answered_natively = true;
      cudaError_t const r = native();
      if (r == cudaSuccess) {  // for the record of observe mode
        ptr = pitchedDevPtr->ptr;
        pitch = pitchedDevPtr->pitch;
      }
      return r;
    });
  if (result == cudaSuccess && !answered_natively) {
    pitchedDevPtr->ptr = ptr;
    pitchedDevPtr->pitch = pitch;
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
  } else if (!answered_natively && pitch != 0) {
    pitchedDevPtr->pitch = pitch;  // as the native call leaves it when out of memory
  }
  return result;
}

CUresult asyncshim_hook_mem_alloc_pitch(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (driver().mem_alloc_pitch == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }  // a driver without it
  auto const native = [&] {
    return static_cast<cudaError_t>(driver().mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
  };
  // Other element sizes are an error natively (cuda.h).
  bool const valid_element = ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16;
  return static_cast<CUresult>(allocate_pitched(driver_pitch_api,
                                                valid_element ? reinterpret_cast<void**>(dptr) : nullptr, pPitch,
                                                WidthInBytes, Height, nullptr, native));
}

CUresult asyncshim_hook_mem_free(CUdeviceptr dptr) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  return static_cast<CUresult>(deallocate_with(driver_api, reinterpret_cast<void*>(dptr)));
}
