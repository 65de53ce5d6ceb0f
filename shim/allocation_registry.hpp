// Which pointers the shim handed out: the ownership record that lets cudaFree
// tell pool memory (freed stream-ordered) from everything else (passed to the
// native cudaFree untouched). Sharded so threads freeing different pointers
// rarely meet on a lock; no lock is ever held across a CUDA call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace asyncshim::shim {

struct allocation_record {
  std::size_t bytes = 0;
  int device = 0;
};

class allocation_registry {
 public:
  // Throws std::bad_alloc when the record cannot be stored.
  void insert(void const* ptr, allocation_record record);
  // Removes and returns the record of `ptr`; nothing when the shim did not allocate it.
  [[nodiscard]] std::optional<allocation_record> take(void const* ptr) noexcept;
  // Whether `ptr` is the start of a block the shim handed out.
  [[nodiscard]] bool contains(void const* ptr) noexcept;
  // Removes and returns every record of `device` (a device reset).
  [[nodiscard]] std::vector<std::pair<void*, allocation_record>> take_device(int device) noexcept;

 private:
  static constexpr std::size_t shard_count = 64;
  struct alignas(64) shard {
    std::mutex mutex;
    std::unordered_map<std::uintptr_t, allocation_record> records;
  };
  [[nodiscard]] static std::size_t shard_of(std::uintptr_t address) noexcept;

  std::array<shard, shard_count> shards_;
};

}  // namespace asyncshim::shim
