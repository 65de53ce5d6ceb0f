#include "state/memory_limits.hpp"

namespace asyncshim::shim {

std::uint64_t memory_limits::resolve(int device, std::uint64_t total_bytes) noexcept
{
  if (!any_ || device < 0 || device >= max_devices) { return 0; }
  auto& slot = limits_[static_cast<std::size_t>(device)];
  std::uint64_t known = slot.load(std::memory_order_acquire);
  if (known == 0) {
    std::optional<config::size_spec> const spec = spec_.of(device);
    std::uint64_t const bytes = spec ? spec->resolve(total_bytes, total_bytes) : none;
    // A percentage that rounds down to no byte is a limit of one byte, not none.
    std::uint64_t const resolved = bytes == 0 ? 1 : bytes;
    known = slot.compare_exchange_strong(known, resolved, std::memory_order_acq_rel) ? resolved : known;
  }
  return known == none ? 0 : known;
}

std::optional<std::uint64_t> memory_limits::limit(int device) const noexcept
{
  if (!any_ || device < 0 || device >= max_devices) { return 0; }
  std::uint64_t const known = limits_[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
  if (known == 0) { return std::nullopt; }
  return known == none ? 0 : known;
}

bool memory_limits::add_native(void const* ptr, native_block block) noexcept
{
  if (block.device < 0 || block.device >= max_devices) { return true; }  // no limit counts it
  // The native allocator hands an address out again only after its free,
  // which took the record: a record still there is stale, and replaced.
  if (std::optional<native_block> const stale = take_native(ptr)) { (void)stale; }
  try {
    std::lock_guard lock{native_mutex_};
    native_.emplace(ptr, block);
  } catch (...) {
    return false;
  }
  native_bytes_[static_cast<std::size_t>(block.device)].fetch_add(block.bytes, std::memory_order_relaxed);
  return true;
}

std::optional<memory_limits::native_block> memory_limits::take_native(void const* ptr) noexcept
{
  native_block block;
  {
    std::lock_guard lock{native_mutex_};
    auto const found = native_.find(ptr);
    if (found == native_.end()) { return std::nullopt; }
    block = found->second;
    native_.erase(found);
  }
  native_bytes_[static_cast<std::size_t>(block.device)].fetch_sub(block.bytes, std::memory_order_relaxed);
  return block;
}

void memory_limits::forget_native(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return; }
  std::lock_guard lock{native_mutex_};
  std::uint64_t forgotten = 0;
  for (auto it = native_.begin(); it != native_.end();) {
    if (it->second.device == device) {
      forgotten += it->second.bytes;
      it = native_.erase(it);
    } else {
      ++it;
    }
  }
  native_bytes_[static_cast<std::size_t>(device)].fetch_sub(forgotten, std::memory_order_relaxed);
}

std::uint64_t memory_limits::native_bytes(int device) const noexcept
{
  if (device < 0 || device >= max_devices) { return 0; }
  return native_bytes_[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
}

}  // namespace asyncshim::shim
