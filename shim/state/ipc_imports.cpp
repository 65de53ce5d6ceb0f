#include "state/ipc_imports.hpp"

namespace asyncshim::shim {

std::optional<std::uintptr_t> ipc_imports::reopen(std::uint64_t exporter, std::uint64_t block) noexcept
{
  if (count_.load(std::memory_order_acquire) == 0) { return std::nullopt; }
  std::lock_guard lock{mutex_};
  auto const known = address_of_.find({exporter, block});
  if (known == address_of_.end()) { return std::nullopt; }
  ++open_.at(known->second).opens;
  return known->second;
}

void ipc_imports::add(std::uint64_t exporter, std::uint64_t block, std::uintptr_t address)
{
  std::lock_guard lock{mutex_};
  auto const [entry, inserted] = open_.try_emplace(address, open_block{exporter, block, 0});
  try {
    address_of_.emplace(std::pair{exporter, block}, address);
  } catch (...) {
    if (inserted) { open_.erase(entry); }
    throw;
  }
  ++entry->second.opens;
  count_.store(open_.size(), std::memory_order_release);
}

import_close ipc_imports::close(std::uintptr_t address) noexcept
{
  if (count_.load(std::memory_order_acquire) == 0) { return import_close::not_imported; }
  std::lock_guard lock{mutex_};
  auto const entry = open_.find(address);
  if (entry == open_.end()) { return import_close::not_imported; }
  if (--entry->second.opens > 0) { return import_close::still_open; }
  address_of_.erase({entry->second.exporter, entry->second.block});
  open_.erase(entry);
  count_.store(open_.size(), std::memory_order_release);
  return import_close::last_close;
}

bool ipc_imports::contains(std::uintptr_t address) const noexcept
{
  if (count_.load(std::memory_order_acquire) == 0) { return false; }
  std::lock_guard lock{mutex_};
  return open_.count(address) != 0;
}

std::optional<void*> ipc_imports::pool(std::uint64_t exporter, int device, std::uint64_t generation) const
{
  std::lock_guard lock{mutex_};
  auto const found = pools_.find({exporter, device, generation});
  if (found == pools_.end()) { return std::nullopt; }
  return found->second;
}

bool ipc_imports::keep_pool(std::uint64_t exporter, int device, std::uint64_t generation, void* pool) noexcept
{
  try {
    std::lock_guard lock{mutex_};
    pools_.emplace(pool_key{exporter, device, generation}, pool);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace asyncshim::shim
