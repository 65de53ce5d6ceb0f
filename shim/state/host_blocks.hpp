// Pinned host memory served from the shim's pool in host memory
// (ASYNCSHIM_HOST_POOL, core/host_allocator.cpp): the pool and the blocks it
// has handed out. A block is listed from its allocation until its free has
// waited for every device; only then does it go back to the pool, so the pool
// never hands out again a block that queued work may still touch.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace asyncshim::shim {

struct host_block {
  std::size_t bytes = 0;
  unsigned flags = 0;  ///< as cudaHostGetFlags reports them (cudaHostAlloc's bits, the same as cuMemHostAlloc's)
};

class host_blocks {
 public:
  /// A block just allocated; false when there is no host memory to list it.
  [[nodiscard]] bool insert(void* base, host_block block) noexcept;
  /// The block based at `base`, no longer listed; none when `base` is not a
  /// listed block's base.
  [[nodiscard]] std::optional<host_block> take(void* base) noexcept;
  /// The block `address` lies in, and its base (one atomic load when none is listed).
  [[nodiscard]] std::optional<std::pair<void*, host_block>> containing(void const* address) const noexcept;

  /// Blocks the program freed while a stream capture was in progress (a wait
  /// for the devices would have ended it): no one's, and not yet the pool's.
  /// @{
  /// False when there is no host memory to keep it.
  [[nodiscard]] bool defer(void* base, host_block block) noexcept;
  [[nodiscard]] bool is_deferred(void const* base) const noexcept;
  [[nodiscard]] bool any_deferred() const noexcept { return deferred_count_.load(std::memory_order_acquire) != 0; }
  /// Every deferred block, no longer kept here.
  [[nodiscard]] std::map<std::uintptr_t, host_block> take_deferred() noexcept;
  /// @}

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, host_block> blocks_;
  std::map<std::uintptr_t, host_block> deferred_;
  std::atomic<std::size_t> count_{0};
  std::atomic<std::size_t> deferred_count_{0};
};

/// The pool in host memory, made once on the first request that may use it.
struct host_memory {
  enum class pool_state { not_made, made, unavailable };
  std::mutex making;  ///< held while the pool is made
  std::atomic<pool_state> state{pool_state::not_made};
  CUmemoryPool pool = nullptr;  ///< set once, before state becomes made
  host_blocks blocks;
};

}  // namespace asyncshim::shim
