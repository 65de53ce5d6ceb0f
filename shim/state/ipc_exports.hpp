// The pool blocks this process has given a legacy IPC handle
// (cudaIpcGetMemHandle on the shim's pool memory), for its channel to answer
// importers with (core/ipc_export.cpp). An entry lives from the first handle
// of a block until the program frees the block: then its handles name
// nothing, and an importer is refused as natively (a handle of freed memory
// opens with an invalid value). Serials are never reused, so a handle of a
// freed block never names a new block at the same address.
#pragma once

#include "support/ipc_handle.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace asyncshim::shim {

inline constexpr std::size_t pool_export_data_size = 64;  ///< sizeof(CUmemPoolPtrExportData)
using pool_export_data = std::array<unsigned char, pool_export_data_size>;

struct exported_block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  int device = 0;
  pool_export_data data{};  ///< cuMemPoolExportPointer's, made once per block
  ipc_handle_bytes handle{};
};

/// The pool descriptor (cuMemPoolExportToShareableHandle) that importers of a
/// device's blocks get, made once per pool; the generation changes with the
/// pool (a device reset makes a new one), so that importers import it anew.
struct pool_share {
  int fd = -1;
  std::uint64_t generation = 0;
};

class ipc_exports {
 public:
  /// The handle already made for the block at `address`.
  [[nodiscard]] std::optional<ipc_handle_bytes> handle_of(std::uintptr_t address) const;
  /// Records a block and makes its handle (the one recorded first, should
  /// another thread have recorded it meanwhile). Throws std::bad_alloc.
  ipc_handle_bytes add(exported_block block, ipc_handle const& identity);
  /// The block a handle's serial names, while the program has not freed it.
  [[nodiscard]] std::optional<exported_block> find(std::uint64_t serial) const;
  /// The program freed the block at `address` (one atomic load when nothing
  /// was ever exported); whether it had been exported.
  bool forget(std::uintptr_t address) noexcept;
  /// A device reset freed every block of `device`.
  void forget_device(int device) noexcept;
  [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_acquire); }

  [[nodiscard]] std::optional<pool_share> pool_share_of(int device) const;
  /// The same with a duplicate of the descriptor (close-on-exec, the caller's
  /// to close), made under the lock so that a reset closing the original
  /// meanwhile cannot hand out whatever reuses its number.
  [[nodiscard]] std::optional<pool_share> pool_share_copy(int device) const;
  /// Keeps `fd` as the device's pool descriptor (closing one made meanwhile by
  /// another thread, whose descriptor stays); returns the one kept. Throws std::bad_alloc.
  pool_share keep_pool_share(int device, int fd);
  /// Whether any importer has asked for a block (for the exit message).
  /// @{
  void note_request() noexcept { requested_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool requested() const noexcept { return requested_.load(std::memory_order_relaxed); }
  /// @}
  /// How many blocks were ever given a handle.
  [[nodiscard]] std::uint64_t ever_exported() const noexcept { return ever_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::uint64_t> serial_of_;
  std::unordered_map<std::uint64_t, exported_block> blocks_;
  std::unordered_map<int, pool_share> pool_shares_;
  std::uint64_t next_serial_ = 1;
  std::uint64_t next_generation_ = 1;
  std::atomic<bool> requested_{false};
  std::atomic<std::uint64_t> ever_{0};
  std::atomic<std::size_t> count_{0};
};

}  // namespace asyncshim::shim
