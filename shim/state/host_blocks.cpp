#include "state/host_blocks.hpp"

#include <iterator>

namespace asyncshim::shim {

bool host_blocks::insert(void* base, host_block block) noexcept
{
  std::lock_guard lock{mutex_};
  try {
    blocks_.insert_or_assign(reinterpret_cast<std::uintptr_t>(base), block);
  } catch (...) {
    return false;
  }
  count_.store(blocks_.size(), std::memory_order_release);
  return true;
}

std::optional<host_block> host_blocks::take(void* base) noexcept
{
  if (count_.load(std::memory_order_acquire) == 0) { return std::nullopt; }
  std::lock_guard lock{mutex_};
  auto const found = blocks_.find(reinterpret_cast<std::uintptr_t>(base));
  if (found == blocks_.end()) { return std::nullopt; }
  host_block const block = found->second;
  blocks_.erase(found);
  count_.store(blocks_.size(), std::memory_order_release);
  return block;
}

std::optional<std::pair<void*, host_block>> host_blocks::containing(void const* address) const noexcept
{
  if (count_.load(std::memory_order_acquire) == 0) { return std::nullopt; }
  auto const a = reinterpret_cast<std::uintptr_t>(address);
  std::lock_guard lock{mutex_};
  auto after = blocks_.upper_bound(a);
  if (after == blocks_.begin()) { return std::nullopt; }
  auto const& [base, block] = *std::prev(after);
  if (a - base >= block.bytes) { return std::nullopt; }
  return std::pair{reinterpret_cast<void*>(base), block};
}

bool host_blocks::defer(void* base, host_block block) noexcept
{
  std::lock_guard lock{mutex_};
  try {
    deferred_.insert_or_assign(reinterpret_cast<std::uintptr_t>(base), block);
  } catch (...) {
    return false;
  }
  deferred_count_.store(deferred_.size(), std::memory_order_release);
  return true;
}

bool host_blocks::is_deferred(void const* base) const noexcept
{
  if (!any_deferred()) { return false; }
  std::lock_guard lock{mutex_};
  return deferred_.contains(reinterpret_cast<std::uintptr_t>(base));
}

std::map<std::uintptr_t, host_block> host_blocks::take_deferred() noexcept
{
  std::lock_guard lock{mutex_};
  std::map<std::uintptr_t, host_block> taken;
  taken.swap(deferred_);
  deferred_count_.store(0, std::memory_order_release);
  return taken;
}

}  // namespace asyncshim::shim
