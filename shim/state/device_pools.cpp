#include "state/device_pools.hpp"

#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/peer_access.hpp"
#include "support/log.hpp"

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace asyncshim::shim {
namespace {

std::optional<std::uint64_t> resolve(std::optional<config::size_spec> const& spec, std::uint64_t total,
                                     std::uint64_t free)
{
  if (!spec) { return std::nullopt; }
  return spec->resolve(total, free);
}

// "4.0 GiB, from ASYNCSHIM_INITIAL_POOL_SIZE=4GiB", or what the default is
// when the user set nothing ("none, the default").
std::string size_and_source(std::uint64_t bytes, char const* variable, std::optional<config::size_spec> const& spec,
                            char const* default_text)
{
  if (!spec) { return fmt::format("{}, the default", default_text); }
  return fmt::format("{}, from {}={}", byte_count{bytes}, variable, spec->to_string());
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute)
{
  std::uint64_t value = 0;
  if (cudaMemPoolGetAttribute(pool, attribute, &value) != cudaSuccess) { (void)cudaGetLastError(); }
  return value;
}

// A failed CUDA call while the pool is made (the shim's messages name CUDA's
// error, never where in the shim it happened).
struct creation_error : std::runtime_error {
  creation_error(char const* call, int code) : std::runtime_error{fmt::format("{}: {}", call, cuda_status{code})} {}
};

void set_pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, int value)
{
  if (cudaError_t const error = cudaMemPoolSetAttribute(pool, attribute, &value); error != cudaSuccess) {
    (void)cudaGetLastError();
    throw creation_error{"cudaMemPoolSetAttribute", error};
  }
}

// The shim's stream and legacy-stream event, in the current context (made
// with the real driver calls: the shim does not follow its own stream).
device_streams make_streams()
{
  auto const& drv = driver();
  if (drv.ctx_get_current == nullptr || drv.stream_create == nullptr || drv.event_create == nullptr) {
    throw std::runtime_error{"the CUDA driver lacks cuStreamCreate or cuEventCreate"};
  }
  device_streams made;
  if (CUresult const r = drv.ctx_get_current(&made.context); r != CUDA_SUCCESS || made.context == nullptr) {
    throw std::runtime_error{"no current CUDA context"};
  }
  if (CUresult const r = drv.stream_create(&made.own, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    throw creation_error{"cuStreamCreate", r};
  }
  if (CUresult const r = drv.event_create(&made.legacy_fence, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
    (void)drv.stream_destroy(made.own);
    throw creation_error{"cuEventCreate", r};
  }
  if (CUresult const r = drv.event_create(&made.in_order_barrier, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
    (void)drv.event_destroy(made.legacy_fence);
    (void)drv.stream_destroy(made.own);
    throw creation_error{"cuEventCreate", r};
  }
  return made;
}

// Reserves `bytes` (which only ASYNCSHIM_INITIAL_POOL_SIZE asks for) in the
// pool by allocating and freeing them on the legacy
// stream, as the resource class primes (memory freed there is what the
// allocations on it take first: priming on the shim's own stream instead
// measured 0.6x the pairs per second of 4 and 16 threads on an H200). The
// device may not have them (other processes hold memory): then the pool
// starts empty, and the message says what to do.
void prime(int device, cuda_async_memory_resource& pool, std::uint64_t bytes, std::uint64_t device_free,
           config::settings const& settings) noexcept
{
  if (bytes == 0) { return; }
  void* block = nullptr;
  cudaStream_t const stream = cuda_stream_default.value();
  cudaError_t error = pool.try_allocate_async(&block, bytes, stream);
  if (error == cudaSuccess) {
    error = pool.try_deallocate_async(block, stream);
    if (error == cudaSuccess) { return; }
  }
  (void)cudaGetLastError();  // the program's last error stays its own
  try {
    log::warn("device {}: cannot reserve the initial pool of {}, from ASYNCSHIM_INITIAL_POOL_SIZE={} ({}; the "
              "device has {} free): the pool starts empty and grows as the program allocates. Set "
              "ASYNCSHIM_INITIAL_POOL_SIZE below the free memory, or leave it unset to reserve nothing",
              device, byte_count{bytes}, settings.initial_pool_size->to_string(), cuda_status{error},
              byte_count{device_free});
  } catch (...) {  // no host memory for the message: the pool works all the same
  }
}

// ASYNCSHIM_EXPORT_HANDLE_TYPE for `device`: auto is posix_file_descriptor
// where the device's pools support it, so that legacy IPC works on pool
// memory (core/ipc_export.cpp). Such a pool gives memory back as any other
// until a block of it is exported (measured on an H200: docs/design.md,
// "Several GPUs and several processes").
config::handle_type resolve_handle_type(config::handle_type wanted, int device) noexcept
{
  if (wanted != config::handle_type::automatic) { return wanted; }
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, device) != cudaSuccess) {
    (void)cudaGetLastError();  // the program's last error stays its own
    return config::handle_type::none;
  }
  return (supported & cudaMemHandleTypePosixFileDescriptor) != 0 ? config::handle_type::posix_file_descriptor
                                                                 : config::handle_type::none;
}

// Why a pool could not be made, and what the user can do about it.
std::string creation_failure(std::exception const& e, config::settings const& settings)
{
  if (dynamic_cast<logic_error const*>(&e) != nullptr) {
    bool const exporting = settings.export_handle_type != config::handle_type::none &&
                           settings.export_handle_type != config::handle_type::automatic;
    return fmt::format("{}. {}", e.what(),
                       exporting ? "Set ASYNCSHIM_EXPORT_HANDLE_TYPE to a handle type the device supports, or to none"
                                 : "This device or driver has no stream-ordered memory pools");
  }
  if (auto const* cuda = dynamic_cast<cuda_error const*>(&e)) {
    return fmt::format("CUDA returned {}. Set ASYNCSHIM_DISABLE=1 to keep asyncshim out of this process",
                       cuda_status{cuda->error()});
  }
  if (auto const* oom = dynamic_cast<asyncshim::bad_alloc const*>(&e)) {
    return fmt::format("CUDA returned {}: the device has no memory left for the pool itself. Free memory on the "
                       "device, or run fewer processes on it",
                       cuda_status{oom->error()});
  }
  if (dynamic_cast<std::bad_alloc const*>(&e) != nullptr) { return "the host has no memory left"; }
  return e.what();
}

// The one message of a device whose pool cannot be made: what was asked for,
// what went wrong, and what happens now.
void report_creation_failure(int device, std::uint64_t initial, std::optional<std::uint64_t> threshold,
                             std::exception const& e, config::settings const& settings) noexcept
{
  try {
    bool const chosen = settings.export_handle_type != config::handle_type::automatic;
    log::error("device {}: cannot create the asyncshim pool (initial size: {}; release threshold: {}; export handle "
               "type: {}): {}. cudaMalloc and cudaFree on device {} go to the native allocator",
               device, size_and_source(initial, "ASYNCSHIM_INITIAL_POOL_SIZE", settings.initial_pool_size, "none"),
               size_and_source(threshold.value_or(0), "ASYNCSHIM_RELEASE_THRESHOLD", settings.release_threshold,
                               "the device's total memory"),
               chosen
                 ? fmt::format("{}, from ASYNCSHIM_EXPORT_HANDLE_TYPE", config::to_string(settings.export_handle_type))
                 : std::string{"auto, the default"},
               creation_failure(e, settings), device);
  } catch (...) {  // no host memory for the message: the passthrough still happens
  }
}

// The peers the program gave access to this device's memory before its
// pool existed (state/peer_access.hpp).
void apply_peer_access(int device, cudaMemPool_t pool) noexcept
{
  std::uint64_t const accessors = peer_access().accessors_of(device);
  for (int accessor = 0; accessor < peer_access_map::max_devices; ++accessor) {
    if (accessor == device || (accessors >> accessor & 1U) == 0) { continue; }
    if (CUresult const r = set_pool_access(reinterpret_cast<CUmemoryPool>(pool), accessor, true); r != CUDA_SUCCESS) {
      log::warn("device {}: cannot give device {} access to the pool ({}), although peer access is enabled", device,
                accessor, cuda_status{r});
    }
  }
}

}  // namespace

cuda_async_memory_resource* device_pools::get(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return nullptr; }
  slot& s = slots_[static_cast<std::size_t>(device)];
  state current = s.current.load(std::memory_order_acquire);
  if (current == state::not_created) {
    std::lock_guard lock{s.creation};
    if (s.current.load(std::memory_order_acquire) == state::not_created) { create(device, s); }
    current = s.current.load(std::memory_order_acquire);
  }
  return current == state::ready ? s.pool.get() : nullptr;
}

cuda_async_memory_resource* device_pools::existing(int device) const noexcept
{
  if (device < 0 || device >= max_devices) { return nullptr; }
  slot const& s = slots_[static_cast<std::size_t>(device)];
  return s.current.load(std::memory_order_seq_cst) == state::ready ? s.pool.get() : nullptr;
}

device_streams const& device_pools::streams(int device) const noexcept
{
  return slots_[static_cast<std::size_t>(device)].streams;
}

int device_pools::device_of_context(CUcontext context) const noexcept
{
  if (context == nullptr) { return -1; }
  // The device this thread found last, checked again; else every device.
  // Initial-exec: one load at every allocation, no call to find it.
  __attribute__((tls_model("initial-exec"))) static thread_local int last = 0;
  auto const holds = [&](int device) {
    slot const& s = slots_[static_cast<std::size_t>(device)];
    return s.current.load(std::memory_order_acquire) == state::ready && s.streams.context == context;
  };
  if (holds(last)) { return last; }
  for (int device = 0; device < max_devices; ++device) {
    if (holds(device)) {
      last = device;
      return device;
    }
  }
  return -1;
}

void device_pools::retire(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return; }
  slot& s = slots_[static_cast<std::size_t>(device)];
  std::lock_guard lock{s.creation};
  if (s.current.load(std::memory_order_acquire) != state::ready) { return; }
  s.current.store(state::not_created, std::memory_order_release);
  auto const& drv = driver();
  if (drv.mem_pool_destroy != nullptr) {
    (void)drv.mem_pool_destroy(reinterpret_cast<CUmemoryPool>(s.pool->pool_handle()));
  }
  if (drv.event_destroy != nullptr) {
    (void)drv.event_destroy(s.streams.legacy_fence);
    (void)drv.event_destroy(s.streams.in_order_barrier);
  }
  if (drv.stream_destroy != nullptr) { (void)drv.stream_destroy(s.streams.own); }
  s.streams = {};
  try {
    s.retired.push_back(std::move(s.pool));
  } catch (...) {
    (void)s.pool.release();  // kept alive, unreachable: never destroyed twice
  }
  log::info("device {}: reset; its asyncshim pool is gone and a new one is made on the next allocation", device);
}

config::handle_type device_pools::export_handle_type(int device) const noexcept
{
  if (existing(device) == nullptr) { return config::handle_type::none; }
  return slots_[static_cast<std::size_t>(device)].export_type;
}

std::uint64_t device_pools::reuse_limit(int device) const noexcept
{
  if (existing(device) == nullptr) { return 0; }
  return slots_[static_cast<std::size_t>(device)].reuse_limit;
}

bool device_pools::unbounded(int device) const noexcept
{
  if (existing(device) == nullptr) { return false; }
  return slots_[static_cast<std::size_t>(device)].unbounded;
}

std::uint64_t device_pools::backlog_limit(int device) const noexcept
{
  if (existing(device) == nullptr) { return no_backlog_limit; }
  return slots_[static_cast<std::size_t>(device)].backlog_limit;
}

std::uint64_t device_pools::kept_bytes(int device) const noexcept
{
  if (device < 0 || device >= max_devices) { return 0; }
  return slots_[static_cast<std::size_t>(device)].kept;
}

void device_pools::create(int device, slot& s) noexcept
{
  std::optional<std::uint64_t> threshold;
  std::uint64_t initial = 0;
  try {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaError_t const error = cudaMemGetInfo(&free_bytes, &total_bytes); error != cudaSuccess) {
      (void)cudaGetLastError();
      throw creation_error{"cudaMemGetInfo", error};
    }
    initial = resolve(settings_.initial_pool_size, total_bytes, free_bytes).value_or(0);
    threshold = resolve(settings_.release_threshold, total_bytes, free_bytes);
    std::uint64_t const limit = limits_ != nullptr ? limits_->resolve(device, total_bytes) : 0;
    if (limit != 0 && initial > limit) {
      log::warn("device {}: the initial pool size ({}) is above the memory limit ({}, ASYNCSHIM_MEMORY_LIMIT): the "
                "pool reserves the limit",
                device, byte_count{initial}, byte_count{limit});
      initial = limit;
    }
    if (threshold && initial > *threshold) {
      log::warn("device {}: the initial pool size ({}) is above the release threshold ({}): the pool gives the "
                "excess back at the next synchronization",
                device, byte_count{initial}, byte_count{*threshold});
    }
    // The class primes its pool with half of the free memory unless told
    // otherwise; the shim primes only what the user asked for, itself, so
    // that an initial size the device cannot give leaves a working pool.
    using handle = cuda_async_memory_resource::allocation_handle_type;
    config::handle_type export_type = resolve_handle_type(settings_.export_handle_type, device);
    bool bounded = limit != 0;
    auto const make_bounded_pool = [&] {
      // The pool itself never reserves past the limit.
      return std::make_unique<cuda_async_memory_resource>(std::size_t{0}, threshold, static_cast<handle>(export_type),
                                                          bounded ? std::optional<std::size_t>{limit} : std::nullopt);
    };
    auto const make_pool = [&] {
      if (!bounded) { return make_bounded_pool(); }
      try {
        return make_bounded_pool();
      } catch (cuda_error const& e) {
        log::info("device {}: cannot bound the pool by the memory limit ({}): each allocation is checked against it "
                  "instead",
                  device, cuda_status{e.error()});
        bounded = false;
        return make_bounded_pool();
      }
    };
    std::unique_ptr<cuda_async_memory_resource> pool;
    try {
      pool = make_pool();
    } catch (cuda_error const& e) {
      if (settings_.export_handle_type != config::handle_type::automatic || export_type == config::handle_type::none) {
        throw;
      }
      // auto chose a handle type the device lists but could not make a pool
      // with: a pool without one, and legacy IPC stays native-only.
      log::info("device {}: cannot make an exportable pool ({}): the pool has no export handle type", device,
                cuda_status{e.error()});
      export_type = config::handle_type::none;
      pool = make_pool();
    }
    if (settings_.ordering != config::ordering_mode::stream) {
      // Hand out again only memory whose free has completed on the device
      // (opportunistic reuse stays on): a block never comes back with a
      // dependency on a pending free, so it is usable from any stream at once.
      set_pool_attribute(pool->pool_handle(), cudaMemPoolReuseFollowEventDependencies, 0);
      set_pool_attribute(pool->pool_handle(), cudaMemPoolReuseAllowInternalDependencies, 0);
    }
    s.streams = make_streams();
    prime(device, *pool, initial, free_bytes, settings_);
    s.kept = threshold ? *threshold : initial;
    s.reuse_limit = settings_.ordering != config::ordering_mode::device ? 0
                    : settings_.reuse_cache ? resolve(settings_.reuse_cache, total_bytes, free_bytes).value_or(0)
                                            : config::default_reuse_cache_bytes;
    s.backlog_limit = settings_.ordering == config::ordering_mode::device && settings_.free_backlog
                        ? resolve(settings_.free_backlog, total_bytes, free_bytes).value_or(no_backlog_limit)
                        : no_backlog_limit;
    s.export_type = export_type;
    s.unbounded = limit != 0 && !bounded;
    s.pool = std::move(pool);
  } catch (std::exception const& e) {
    report_creation_failure(device, initial, threshold, e, settings_);
    s.pool.reset();
    s.current.store(state::passthrough, std::memory_order_release);
    return;
  } catch (...) {
    s.pool.reset();
    s.current.store(state::passthrough, std::memory_order_release);
    log::error("device {}: cannot create the asyncshim pool; cudaMalloc and cudaFree on device {} go to the native "
               "allocator",
               device, device);
    return;
  }
  // Ready first, grants read after: a grant made meanwhile is applied by
  // this or by the grant itself (both sequentially consistent).
  s.current.store(state::ready, std::memory_order_seq_cst);
  apply_peer_access(device, s.pool->pool_handle());
  if (log::enabled(log::log_level::info)) {
    std::uint64_t const reserved = pool_attribute(s.pool->pool_handle(), cudaMemPoolAttrReservedMemCurrent);
    std::uint64_t const released_above = pool_attribute(s.pool->pool_handle(), cudaMemPoolAttrReleaseThreshold);
    try {
      log::info(
        "device {}: cudaMalloc is redirected to an asyncshim pool: {} reserved, release threshold {}, "
        "idle release {}, export handle type {}, stream {}, ordering {}, reuse cache {}, free backlog {}",
        device, byte_count{reserved}, byte_count{released_above}, config::duration_text(settings_.idle_release_ms),
        config::to_string(s.export_type), config::to_string(settings_.stream), config::to_string(settings_.ordering),
        byte_count{s.reuse_limit},
        s.backlog_limit == no_backlog_limit ? std::string{"off"} : fmt::format("{}", byte_count{s.backlog_limit}));
    } catch (...) {  // no host memory for the message
    }
  }
}

}  // namespace asyncshim::shim
