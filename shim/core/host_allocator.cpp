// Pinned host memory from one pool in host memory (ASYNCSHIM_HOST_POOL):
// cudaMallocHost, cudaHostAlloc, cuMemAllocHost_v2 and cuMemHostAlloc
// without write-combining get a block of a pool in host memory that every
// device may read and write; cudaFreeHost and cuMemFreeHost wait for every
// device, as the native calls do, and only then give the block back to the
// pool (state/host_blocks.hpp). The pool's blocks are not pinned allocations
// to the driver, so the shim answers cudaHostGetDevicePointer and
// cudaHostGetFlags for them, and refuses cudaFree on them as natively.
// Anything else (write-combined or unknown flags, a null pointer, a size of
// 0, no device that supports host pools, the pool out of memory) goes to the
// native call.
#include "core/deferred_frees.hpp"
#include "core/hooks.hpp"
#include "core/observed_blocks.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/runtime.hpp"
#include "state/host_blocks.hpp"
#include "state/live_blocks.hpp"
#include "state/shim_state.hpp"
#include "state/statistics.hpp"
#include "state/stream_tracker.hpp"
#include "support/log.hpp"

#include <cstdint>
#include <vector>

namespace asyncshim::shim {
namespace {

static_assert(cudaHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE && cudaHostAllocMapped == CU_MEMHOSTALLOC_DEVICEMAP &&
              cudaHostAllocWriteCombined == CU_MEMHOSTALLOC_WRITECOMBINED);
/// Every block of the pool is reachable from every device at its own address,
/// as portable, mapped pinned memory is; write-combined memory it cannot give.
constexpr unsigned served_flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;

/// The state, when pinned memory asked for at `level` comes from the pool.
shim_state* serving_host(api_level level) noexcept
{
  // The runtime's own driver call inside an intercepted runtime call is
  // never intercepted a second time.
  if (level == api_level::driver && current_api_level() == api_level::runtime) { return nullptr; }
  shim_state* s = active_state();
  if (s == nullptr || !s->settings.host_pool_serves()) { return nullptr; }
  bool const wanted = level == api_level::runtime ? s->settings.intercepts_runtime() : s->settings.intercepts_driver();
  return wanted ? s : nullptr;
}

/// The state, when it lists host blocks (whatever the level or the settings:
/// a block the pool gave must never reach a native call).
shim_state* listing_host() noexcept
{
  if (current_api_level() == api_level::runtime) { return nullptr; }  // the runtime's own driver call
  return active_state();
}

/// A context current on the calling thread: at the runtime level the
/// runtime's, made as any runtime call makes it; at the driver level only
/// the program's (the native call otherwise fails for want of one).
bool with_context(api_level level) noexcept
{
  if (context_is_current()) { return true; }
  if (level != api_level::runtime) { return false; }
  (void)runtime().free(nullptr);  // the runtime's way of making its context current
  return context_is_current();
}

CUmemoryPool make_host_pool() noexcept
{
  auto const& drv = driver();
  if (drv.mem_pool_create == nullptr || drv.mem_pool_set_access == nullptr || drv.mem_pool_set_attribute == nullptr ||
      drv.mem_alloc_from_pool_async == nullptr || drv.mem_free_async == nullptr || drv.device_get_count == nullptr ||
      drv.device_get_attribute == nullptr || drv.ctx_get_device == nullptr) {
    return nullptr;
  }
  int device = -1;
  int supported = 0;
  if (drv.ctx_get_device(&device) != CUDA_SUCCESS ||
      drv.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, device) != CUDA_SUCCESS ||
      supported == 0) {
    log::info("ASYNCSHIM_HOST_POOL: device {} has no pools in host memory; pinned host memory is allocated natively",
              device);
    return nullptr;
  }
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  if (drv.mem_pool_create(&pool, &props) != CUDA_SUCCESS) { return nullptr; }
  // Freed memory stays in the pool (pinning is what costs); a block freed in
  // one context's order is never handed out with a wait on that context's
  // work added to another's.
  cuuint64_t keep_everything = UINT64_MAX;
  int no_internal_dependencies = 0;
  int devices = 0;
  bool ready = drv.mem_pool_set_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_everything) == CUDA_SUCCESS &&
               drv.mem_pool_set_attribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                                          &no_internal_dependencies) == CUDA_SUCCESS &&
               drv.device_get_count(&devices) == CUDA_SUCCESS && devices > 0;
  try {
    std::vector<CUmemAccessDesc> access(ready ? static_cast<std::size_t>(devices) : 0);
    for (int d = 0; d < devices && ready; ++d) {
      access[static_cast<std::size_t>(d)].location = {CU_MEM_LOCATION_TYPE_DEVICE, d};
      access[static_cast<std::size_t>(d)].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    ready = ready && drv.mem_pool_set_access(pool, access.data(), access.size()) == CUDA_SUCCESS;
  } catch (...) {
    ready = false;
  }
  if (!ready) {
    log::info("ASYNCSHIM_HOST_POOL: the pool in host memory could not be made reachable from every device; pinned "
              "host memory is allocated natively");
    (void)drv.mem_pool_destroy(pool);
    return nullptr;
  }
  return pool;
}

/// The pool in host memory, made on first use in the current context; null
/// where none can be.
CUmemoryPool host_pool(host_memory& host) noexcept
{
  using state = host_memory::pool_state;
  state const seen = host.state.load(std::memory_order_acquire);
  if (seen != state::not_made) { return seen == state::made ? host.pool : nullptr; }
  std::lock_guard lock{host.making};
  if (host.state.load(std::memory_order_relaxed) == state::not_made) {
    host.pool = make_host_pool();
    host.state.store(host.pool != nullptr ? state::made : state::unavailable, std::memory_order_release);
  }
  return host.pool;
}

/// What the native pinned calls answer on this thread now: a byte allocated
/// and freed again (the caller has set its API level).
cudaError_t native_pinned_probe(api_level level) noexcept
{
  void* probe = nullptr;
  if (level == api_level::runtime && runtime().malloc_host != nullptr && runtime().free_host != nullptr) {
    cudaError_t const r = runtime().malloc_host(&probe, 1);
    if (r == cudaSuccess) { (void)runtime().free_host(probe); }
    return r;
  }
  if (driver().mem_alloc_host == nullptr || driver().mem_free_host == nullptr) { return cudaSuccess; }
  auto const r = static_cast<cudaError_t>(driver().mem_alloc_host(&probe, 1));
  if (r == cudaSuccess) { (void)driver().mem_free_host(probe); }
  return r;
}

/// How the leak report and the event log see the pool's blocks: pinned, on
/// the legacy stream the pool allocates on (0 in the log).
constexpr logged_as pinned_block{0, event_memory::pinned};

/// The blocks freed during a capture, to the pool now that none is in
/// progress (the caller holds the tracker's access), after a wait for every
/// device unless the caller `waited` just now; kept for later when the wait fails.
void give_back_deferred(shim_state& s, api_level level, bool waited) noexcept;

/// A pinned allocation at `level` with `flags`; `native` answers whatever the
/// pool does not serve.
template <class Native>
cudaError_t allocate_host(api_level level, pinned_call call, void** ptr, std::size_t bytes, unsigned flags,
                          Native native) noexcept
{
  shim_state* s = serving_host(level);
  if (s == nullptr) { return native(); }
  struct reports_armed {  // after the CUDA call, so that the reports are made before the runtime's teardown
    shim_state& s;
    ~reports_armed() { arm_exit_reports(s); }
  } const armed{*s};
  auto const answered_natively = [&] {
    if (s->stats != nullptr) { s->stats->pinned_passed_through(); }
    if (s->leaks != nullptr && ptr != nullptr && bytes != 0) { s->leaks->passed_through(); }
    return native();
  };
  api_level_scope scope{level};  // the native call's own driver call is not intercepted again
  if (ptr == nullptr || bytes == 0 || (flags & ~served_flags) != 0) { return answered_natively(); }
  CUmemoryPool const pool = with_context(level) ? host_pool(s->host) : nullptr;
  if (pool == nullptr) { return answered_natively(); }
  {
    auto const access = tracker().access();  // no capture begins meanwhile
    // During a capture the pool's stream work could end it: the native call answers, as without the shim.
    if (!tracker().captures_in_progress()) {
      give_back_deferred(*s, level, false);
      CUdeviceptr block = 0;
      if (driver().mem_alloc_from_pool_async(&block, bytes, pool, CU_STREAM_LEGACY) == CUDA_SUCCESS) {
        void* const p = reinterpret_cast<void*>(block);
        // Natively every pinned block reports itself mapped, asked or not (unified addressing).
        if (s->host.blocks.insert(p, {bytes, flags | CU_MEMHOSTALLOC_DEVICEMAP})) {
          if (s->stats != nullptr) { s->stats->pinned_served(bytes, call); }
          note_allocated(*s, p, bytes, pinned_host_memory, to_string(call), pinned_block);
          *ptr = p;
          log::trace("pinned host block {} ({} bytes) from the pool in host memory", p, bytes);
          return cudaSuccess;
        }
        (void)driver().mem_free_async(block, CU_STREAM_LEGACY);
      }
    }
  }
  return answered_natively();
}

/// Waits for every device's work, as native cudaFreeHost does: the current
/// context's, every device's primary context that is active, and the
/// contexts the program made.
cudaError_t wait_for_every_device(api_level level) noexcept
{
  auto const& drv = driver();
  cudaError_t result = synchronize_device(level);
  int devices = 0;
  if (drv.device_get_count == nullptr || drv.device_get_count(&devices) != CUDA_SUCCESS) { return result; }
  for (int d = 0; d < devices; ++d) {
    unsigned flags = 0;
    int active = 1;  // a driver that cannot say: every device is waited for
    if (drv.device_primary_ctx_get_state != nullptr &&
        drv.device_primary_ctx_get_state(d, &flags, &active) != CUDA_SUCCESS) {
      active = 0;
    }
    if (active != 0) {
      if (std::optional<cudaError_t> const r = synchronize_primary_context(d); r && result == cudaSuccess) {
        result = *r;
      }
    }
    if (cudaError_t const r = synchronize_program_contexts(d); result == cudaSuccess) { result = r; }
  }
  return result;
}

void give_back_deferred(shim_state& s, api_level level, bool waited) noexcept
{
  if (!s.host.blocks.any_deferred()) { return; }
  std::map<std::uintptr_t, host_block> blocks = s.host.blocks.take_deferred();
  bool const idle = waited || wait_for_every_device(level) == cudaSuccess;
  for (auto const& [base, block] : blocks) {
    if (!idle || driver().mem_free_async(static_cast<CUdeviceptr>(base), CU_STREAM_LEGACY) != CUDA_SUCCESS) {
      (void)s.host.blocks.defer(reinterpret_cast<void*>(base), block);
    }
  }
}

/// Frees a pinned block at `level`: the pool's after every device's work
/// has finished; any other pointer by the native call, native(pointer).
template <class Native>
cudaError_t free_host(api_level level, void* ptr, Native native) noexcept
{
  shim_state* s = ptr != nullptr ? listing_host() : nullptr;
  std::optional<host_block> const block = s != nullptr ? s->host.blocks.take(ptr) : std::nullopt;
  if (!block) {
    if (s != nullptr && (s->host.blocks.containing(ptr) || s->host.blocks.is_deferred(ptr))) {
      // Inside one of the pool's blocks, or one freed already: the native
      // error for memory that is no pinned allocation (and the runtime's last
      // error with it).
      static char not_pinned = 0;
      return native(&not_pinned);
    }
    return native(ptr);
  }
  api_level_scope scope{level};
  std::optional<live_block> live = note_freeing(*s, ptr, block->bytes, pinned_block);  // before the pool can reissue it
  cudaError_t result = with_context(level) ? cudaSuccess : static_cast<cudaError_t>(CUDA_ERROR_INVALID_CONTEXT);
  if (result == cudaSuccess) {
    auto const access = tracker().access();  // no capture begins while the shim waits
    if (tracker().captures_in_progress()) {
      // A thread the capture forbids such calls fails as the native free
      // would (and ends the capture as it would); otherwise a wait for the
      // devices would end the capture: the block is no one's until the next
      // pinned call made while none is in progress gives it back.
      if (tracker().calling_thread_is_prohibited()) { result = native_pinned_probe(level); }
      if (result == cudaSuccess) {
        result = s->host.blocks.defer(ptr, *block) ? cudaSuccess : cudaErrorMemoryAllocation;
      }
    } else {
      result = wait_for_every_device(level);
      if (result == cudaSuccess) {
        result =
          static_cast<cudaError_t>(driver().mem_free_async(reinterpret_cast<CUdeviceptr>(ptr), CU_STREAM_LEGACY));
      }
      if (result == cudaSuccess) { give_back_deferred(*s, level, true); }
    }
  }
  if (result != cudaSuccess) {
    note_free_failed(*s, ptr, block->bytes, std::move(live), pinned_block);
    (void)s->host.blocks.insert(ptr, *block);  // still the program's: a retry frees it
    return result;
  }
  if (s->stats != nullptr) { s->stats->pinned_freed(block->bytes); }
  log::trace("pinned host block {} ({} bytes) freed (to the pool in host memory)", ptr, block->bytes);
  return cudaSuccess;
}

/// The pool's block `address` lies in, if any.
std::optional<std::pair<void*, host_block>> pool_block_at(void const* address) noexcept
{
  shim_state* s = address != nullptr ? listing_host() : nullptr;
  return s != nullptr ? s->host.blocks.containing(address) : std::nullopt;
}

}  // namespace

}  // namespace asyncshim::shim

using asyncshim::shim::api_level;

cudaError_t asyncshim_hook_malloc_host(void** ptr, size_t size, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().malloc_host == nullptr) { return runtime_missing_error; }
  return allocate_host(api_level::runtime, pinned_call::malloc_host, ptr, size, 0,
                       [&] { return runtime().malloc_host(ptr, size); });
}

cudaError_t asyncshim_hook_host_alloc(void** pHost, size_t size, unsigned int flags, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().host_alloc == nullptr) { return runtime_missing_error; }
  return allocate_host(api_level::runtime, pinned_call::host_alloc, pHost, size, flags,
                       [&] { return runtime().host_alloc(pHost, size, flags); });
}

cudaError_t asyncshim_hook_free_host(void* ptr, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().free_host == nullptr) { return runtime_missing_error; }
  return free_host(api_level::runtime, ptr, [](void* p) { return runtime().free_host(p); });
}

cudaError_t asyncshim_hook_host_get_device_pointer(void** pDevice, void* pHost, unsigned int flags,
                                                   void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().host_get_device_pointer == nullptr) { return runtime_missing_error; }
  // Every device reaches a pool block at its host address (flags must be 0, as natively).
  if (pDevice != nullptr && flags == 0 && pool_block_at(pHost)) {
    *pDevice = pHost;
    return cudaSuccess;
  }
  return runtime().host_get_device_pointer(pDevice, pHost, flags);
}

cudaError_t asyncshim_hook_host_get_flags(unsigned int* pFlags, void* pHost, void const* caller) noexcept
{
  using namespace asyncshim::shim;
  if (!runtime(caller).found() || runtime().host_get_flags == nullptr) { return runtime_missing_error; }
  if (auto const block = pFlags != nullptr ? pool_block_at(pHost) : std::nullopt) {
    *pFlags = block->second.flags;
    return cudaSuccess;
  }
  return runtime().host_get_flags(pFlags, pHost);
}

CUresult asyncshim_hook_mem_alloc_host(void** pp, size_t bytesize) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (driver().mem_alloc_host == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  return static_cast<CUresult>(allocate_host(api_level::driver, pinned_call::driver_alloc_host, pp, bytesize, 0, [&] {
    return static_cast<cudaError_t>(driver().mem_alloc_host(pp, bytesize));
  }));
}

CUresult asyncshim_hook_mem_host_alloc(void** pp, size_t bytesize, unsigned int Flags) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (driver().mem_host_alloc == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  return static_cast<CUresult>(
    allocate_host(api_level::driver, pinned_call::driver_host_alloc, pp, bytesize, Flags,
                  [&] { return static_cast<cudaError_t>(driver().mem_host_alloc(pp, bytesize, Flags)); }));
}

CUresult asyncshim_hook_mem_free_host(void* p) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (driver().mem_free_host == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  return static_cast<CUresult>(
    free_host(api_level::driver, p, [](void* q) { return static_cast<cudaError_t>(driver().mem_free_host(q)); }));
}

CUresult asyncshim_hook_mem_host_get_device_pointer(CUdeviceptr* pdptr, void* p, unsigned int Flags) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (driver().mem_host_get_device_pointer == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  if (pdptr != nullptr && Flags == 0 && pool_block_at(p)) {
    *pdptr = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  }
  return driver().mem_host_get_device_pointer(pdptr, p, Flags);
}

CUresult asyncshim_hook_mem_host_get_flags(unsigned int* pFlags, void* p) noexcept
{
  using namespace asyncshim::shim;
  if (!driver().found()) { return CUDA_ERROR_NOT_INITIALIZED; }
  if (driver().mem_host_get_flags == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  if (auto const block = pFlags != nullptr ? pool_block_at(p) : std::nullopt) {
    *pFlags = block->second.flags;
    return CUDA_SUCCESS;
  }
  return driver().mem_host_get_flags(pFlags, p);
}
