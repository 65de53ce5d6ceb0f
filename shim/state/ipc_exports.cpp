#include "state/ipc_exports.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace asyncshim::shim {

std::optional<ipc_handle_bytes> ipc_exports::handle_of(std::uintptr_t address) const
{
  if (size() == 0) { return std::nullopt; }
  std::lock_guard lock{mutex_};
  auto const serial = serial_of_.find(address);
  if (serial == serial_of_.end()) { return std::nullopt; }
  return blocks_.at(serial->second).handle;
}

ipc_handle_bytes ipc_exports::add(exported_block block, ipc_handle const& identity)
{
  std::lock_guard lock{mutex_};
  if (auto const known = serial_of_.find(block.address); known != serial_of_.end()) {
    return blocks_.at(known->second).handle;
  }
  std::uint64_t const serial = next_serial_;
  ipc_handle named = identity;
  named.block = serial;
  named.size = block.size;
  named.device = block.device;
  block.handle = encode(named);
  std::uintptr_t const address = block.address;
  auto const [entry, inserted] = blocks_.emplace(serial, block);
  try {
    serial_of_.emplace(address, serial);
  } catch (...) {
    blocks_.erase(entry);
    throw;
  }
  ++next_serial_;
  ever_.fetch_add(1, std::memory_order_relaxed);
  count_.store(blocks_.size(), std::memory_order_release);
  return entry->second.handle;
}

std::optional<exported_block> ipc_exports::find(std::uint64_t serial) const
{
  std::lock_guard lock{mutex_};
  auto const block = blocks_.find(serial);
  if (block == blocks_.end()) { return std::nullopt; }
  return block->second;
}

bool ipc_exports::forget(std::uintptr_t address) noexcept
{
  if (size() == 0) { return false; }
  std::lock_guard lock{mutex_};
  auto const serial = serial_of_.find(address);
  if (serial == serial_of_.end()) { return false; }
  blocks_.erase(serial->second);
  serial_of_.erase(serial);
  count_.store(blocks_.size(), std::memory_order_release);
  return true;
}

std::optional<pool_share> ipc_exports::pool_share_of(int device) const
{
  std::lock_guard lock{mutex_};
  auto const share = pool_shares_.find(device);
  if (share == pool_shares_.end()) { return std::nullopt; }
  return share->second;
}

std::optional<pool_share> ipc_exports::pool_share_copy(int device) const
{
  std::lock_guard lock{mutex_};
  auto const share = pool_shares_.find(device);
  if (share == pool_shares_.end()) { return std::nullopt; }
  int const copy = fcntl(share->second.fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) { return std::nullopt; }
  return pool_share{copy, share->second.generation};
}

pool_share ipc_exports::keep_pool_share(int device, int fd)
{
  std::lock_guard lock{mutex_};
  if (auto const share = pool_shares_.find(device); share != pool_shares_.end()) {
    (void)close(fd);
    return share->second;
  }
  pool_share const made{fd, next_generation_++};
  pool_shares_.emplace(device, made);
  return made;
}

void ipc_exports::forget_device(int device) noexcept
{
  std::lock_guard lock{mutex_};
  if (auto const share = pool_shares_.find(device); share != pool_shares_.end()) {
    (void)close(share->second.fd);  // the old pool's: importers of the new one get a new descriptor
    pool_shares_.erase(share);
  }
  for (auto block = blocks_.begin(); block != blocks_.end();) {
    if (block->second.device == device) {
      serial_of_.erase(block->second.address);
      block = blocks_.erase(block);
    } else {
      ++block;
    }
  }
  count_.store(blocks_.size(), std::memory_order_release);
}

}  // namespace asyncshim::shim
