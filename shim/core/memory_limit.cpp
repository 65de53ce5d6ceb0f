#include "core/memory_limit.hpp"

#include "core/memory_release.hpp"
#include "cuda/driver.hpp"

#include <algorithm>

namespace asyncshim::shim {
namespace {

// What `device` holds against its limit: the pool's reservation, the native blocks.
std::uint64_t held_against_limit(shim_state& s, int device) noexcept
{
  cuda_async_memory_resource const* pool = s.pools.existing(device);
  return (pool != nullptr ? usage_of(*pool).reserved : 0) + s.limits.native_bytes(device);
}

}  // namespace

std::uint64_t memory_limit_of(shim_state& s, int device) noexcept
{
  if (!s.limits.any()) { return 0; }
  if (std::optional<std::uint64_t> const known = s.limits.limit(device)) { return *known; }
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  auto const get_info = driver().mem_get_info;  // the real one: the device's own total
  if (get_info == nullptr || get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) { return 0; }
  return s.limits.resolve(device, total_bytes);
}

cudaError_t native_out_of_memory(native_calls const& native) noexcept
{
  void* never = nullptr;
  if (native.malloc(&never, std::size_t{1} << 62) == cudaSuccess) { (void)native.free(never); }
  return cudaErrorMemoryAllocation;
}

cudaError_t native_allocation_within_limit(shim_state& s, native_calls const& native, int device, void** dev_ptr,
                                           std::size_t size) noexcept
{
  if (!s.limits.any()) { return native.malloc(dev_ptr, size); }
  std::uint64_t limit = memory_limit_of(s, device);
  auto const refuse = [&] {
    *dev_ptr = nullptr;  // as a failed native allocation leaves it
    return native_out_of_memory(native);
  };
  if (limit != 0 && held_against_limit(s, device) + size > limit) { return refuse(); }
  cudaError_t const result = native.malloc(dev_ptr, size);
  if (result != cudaSuccess) { return result; }
  if (limit == 0) { limit = memory_limit_of(s, device); }  // the call made the context to ask
  if (limit == 0) { return result; }
  // Counted, then checked again: two threads may have passed the first look at once.
  bool const counted = s.limits.add_native(*dev_ptr, {size, device});
  if (counted && held_against_limit(s, device) <= limit) { return result; }
  if (counted) { (void)s.limits.take_native(*dev_ptr); }
  (void)native.free(*dev_ptr);
  return refuse();
}

void native_block_freed(shim_state& s, void const* ptr) noexcept
{
  if (s.limits.any()) { (void)s.limits.take_native(ptr); }
}

bool pool_within_limit(shim_state& s, int device, cuda_async_memory_resource const& pool) noexcept
{
  std::uint64_t const limit = s.limits.limit(device).value_or(0);
  return limit == 0 || usage_of(pool).reserved + s.limits.native_bytes(device) <= limit;
}

void apply_limit_to_memory_info(std::uint64_t limit, std::uint64_t used, std::uint64_t reusable, std::size_t& free,
                                std::size_t& total) noexcept
{
  if (limit == 0) { return; }
  std::uint64_t const left_in_limit = limit > used ? limit - used : 0;
  std::uint64_t const device_free = free;
  std::uint64_t const limited_total = std::min<std::uint64_t>(limit, total);
  free = static_cast<std::size_t>(std::min(limited_total, std::min(left_in_limit, device_free) + reusable));
  total = static_cast<std::size_t>(limited_total);
}

}  // namespace asyncshim::shim
