#include "device_pools.hpp"

#include "byte_text.hpp"
#include "log.hpp"

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
  return s.current.load(std::memory_order_acquire) == state::ready ? s.pool.get() : nullptr;
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
    s.pool = std::make_unique<cuda_async_memory_resource>(
      initial, threshold, static_cast<handle>(settings_.export_handle_type));
    s.current.store(state::ready, std::memory_order_release);
    log::info("device {}: cudaMalloc is redirected to an asyncshim pool: {} reserved, release threshold {}, "
              "export handle type {}, stream {}",
              device, approximate_bytes(pool_attribute(s.pool->pool_handle(), cudaMemPoolAttrReservedMemCurrent)),
              approximate_bytes(pool_attribute(s.pool->pool_handle(), cudaMemPoolAttrReleaseThreshold)),
              config::to_string(settings_.export_handle_type), config::to_string(settings_.stream));
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
