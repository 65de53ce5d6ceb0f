#include "device_pools.hpp"

#include "byte_text.hpp"
#include "driver_binding.hpp"
#include "log.hpp"
#include "peer_access.hpp"

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace asyncshim::shim {
namespace {


std::optional<std::size_t> resolve(std::optional<config::size_spec> const& spec, std::uint64_t total)
{
  if (!spec) { return std::nullopt; }
  return static_cast<std::size_t>(spec->resolve(total));
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute)
{
  std::uint64_t value = 0;
  if (cudaMemPoolGetAttribute(pool, attribute, &value) != cudaSuccess) { (void)cudaGetLastError(); }
  return value;
}

void set_pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, int value)
{
  if (cudaError_t const error = cudaMemPoolSetAttribute(pool, attribute, &value); error != cudaSuccess) {
    throw std::runtime_error{std::string{"cudaMemPoolSetAttribute failed: "} + cudaGetErrorName(error)};
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
    throw std::runtime_error{"cuStreamCreate failed with error " + std::to_string(static_cast<int>(r))};
  }
  if (CUresult const r = drv.event_create(&made.legacy_fence, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
    (void)drv.stream_destroy(made.own);
    throw std::runtime_error{"cuEventCreate failed with error " + std::to_string(static_cast<int>(r))};
  }
  return made;
}

// The peers the program gave access to this device's memory before its
// pool existed (peer_access.hpp).
void apply_peer_access(int device, cudaMemPool_t pool) noexcept
{
  std::uint64_t const accessors = peer_access().accessors_of(device);
  for (int accessor = 0; accessor < peer_access_map::max_devices; ++accessor) {
    if (accessor == device || (accessors >> accessor & 1U) == 0) { continue; }
    if (CUresult const r = set_pool_access(reinterpret_cast<CUmemoryPool>(pool), accessor, true); r != CUDA_SUCCESS) {
      log::warn("device {}: cannot give device {} access to the pool (error {}), although peer access is enabled",
                device, accessor, static_cast<int>(r));
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
  if (drv.event_destroy != nullptr) { (void)drv.event_destroy(s.streams.legacy_fence); }
  if (drv.stream_destroy != nullptr) { (void)drv.stream_destroy(s.streams.own); }
  s.streams = {};
  try {
    s.retired.push_back(std::move(s.pool));
  } catch (...) {
    (void)s.pool.release();  // kept alive, unreachable: never destroyed twice
  }
  log::info("device {}: reset; its asyncshim pool is gone and a new one is made on the next allocation", device);
}

void device_pools::create(int device, slot& s) noexcept
{
  try {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaError_t const error = cudaMemGetInfo(&free_bytes, &total_bytes); error != cudaSuccess) {
      throw std::runtime_error{std::string{"cudaMemGetInfo failed: "} + cudaGetErrorName(error)};
    }
    auto const initial = resolve(settings_.initial_pool_size, total_bytes);
    auto const threshold = resolve(settings_.release_threshold, total_bytes);
    if (initial && threshold && *initial > *threshold) {
      log::warn("device {}: the initial pool size ({}) is above the release threshold ({}): the pool gives the "
                "excess back at the next synchronization",
                device, approximate_bytes(*initial), approximate_bytes(*threshold));
    }
    using handle = cuda_async_memory_resource::allocation_handle_type;
    auto pool = std::make_unique<cuda_async_memory_resource>(
      initial, threshold, static_cast<handle>(settings_.export_handle_type));
    if (settings_.ordering != config::ordering_mode::stream) {
      // Hand out again only memory whose free has completed on the device
      // (opportunistic reuse stays on): a block never comes back with a
      // dependency on a pending free, so it is usable from any stream at once.
      set_pool_attribute(pool->pool_handle(), cudaMemPoolReuseFollowEventDependencies, 0);
      set_pool_attribute(pool->pool_handle(), cudaMemPoolReuseAllowInternalDependencies, 0);
    }
    s.streams = make_streams();
    s.pool = std::move(pool);
    // Ready first, grants read after: a grant made meanwhile is applied by
    // this or by the grant itself (both sequentially consistent).
    s.current.store(state::ready, std::memory_order_seq_cst);
    apply_peer_access(device, s.pool->pool_handle());
    log::info("device {}: cudaMalloc is redirected to an asyncshim pool: {} reserved, release threshold {}, "
              "export handle type {}, stream {}, ordering {}",
              device, approximate_bytes(pool_attribute(s.pool->pool_handle(), cudaMemPoolAttrReservedMemCurrent)),
              approximate_bytes(pool_attribute(s.pool->pool_handle(), cudaMemPoolAttrReleaseThreshold)),
              config::to_string(settings_.export_handle_type), config::to_string(settings_.stream),
              config::to_string(settings_.ordering));
  } catch (std::exception const& e) {
    s.pool.reset();
    s.current.store(state::passthrough, std::memory_order_release);
    log::error("device {}: cannot create the asyncshim pool: {}; cudaMalloc and cudaFree on device {} go to the "
               "native allocator",
               device, e.what(), device);
  } catch (...) {
    s.current.store(state::passthrough, std::memory_order_release);
    log::error("device {}: cannot create the asyncshim pool; cudaMalloc and cudaFree on device {} go to the native "
               "allocator",
               device, device);
  }
}

}  // namespace asyncshim::shim
