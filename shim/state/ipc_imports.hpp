// The blocks this process opened from another process's legacy IPC handles
// of pool memory (core/ipc_import.cpp), and the pools it imported for them.
// Opening one handle again returns the same pointer and counts one more
// open, as natively; the block is unmapped at its last close.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace asyncshim::shim {

enum class import_close { not_imported, still_open, last_close };

class ipc_imports {
 public:
  /// The address of an open block (one more open counted).
  [[nodiscard]] std::optional<std::uintptr_t> reopen(std::uint64_t exporter, std::uint64_t block) noexcept;
  /// A block just imported (the import gives the same address for the same
  /// block: a second add counts a second open). Throws std::bad_alloc.
  void add(std::uint64_t exporter, std::uint64_t block, std::uintptr_t address);
  [[nodiscard]] import_close close(std::uintptr_t address) noexcept;
  /// Whether `address` is an open block (one atomic load when none is).
  [[nodiscard]] bool contains(std::uintptr_t address) const noexcept;

  /// The pool imported for an exporter's device pool (its descriptor's generation).
  [[nodiscard]] std::optional<void*> pool(std::uint64_t exporter, int device, std::uint64_t generation) const;
  /// Keeps an imported pool; false (the caller's is not kept) when there is no host memory for it.
  [[nodiscard]] bool keep_pool(std::uint64_t exporter, int device, std::uint64_t generation, void* pool) noexcept;

 private:
  struct open_block {
    std::uint64_t exporter = 0;
    std::uint64_t block = 0;
    std::uint64_t opens = 0;
  };
  using pool_key = std::tuple<std::uint64_t, int, std::uint64_t>;

  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, open_block> open_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uintptr_t> address_of_;
  std::map<pool_key, void*> pools_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace asyncshim::shim
