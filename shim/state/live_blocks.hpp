// The blocks the program has allocated and not freed, with where and when
// each came from, for the leak report at exit (ASYNCSHIM_LEAK_REPORT,
// state/leak_report.hpp) and the out-of-memory report's largest blocks
// (ASYNCSHIM_LEAK_STACK_DEPTH). Kept only when one of them was asked for:
// each allocation and free then takes one lock and a host allocation here.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace asyncshim::shim {

/// The most frames a stack keeps (ASYNCSHIM_LEAK_STACK_DEPTH's limit).
inline constexpr std::size_t live_blocks_max_frames = 64;

/// The device of a block of pinned host memory (the host pool's, ASYNCSHIM_HOST_POOL);
/// not statistics::unattributed (-1), a device block whose device was not known.
inline constexpr int pinned_host_memory = -2;

struct live_block {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  int device = 0;                 ///< or pinned_host_memory
  char const* entry_point = "";   ///< the call that allocated it ("cudaMalloc"; a string that lives for good)
  long thread = 0;                ///< the allocating thread's id (gettid)
  std::int64_t allocated_ns = 0;  ///< steady clock
  /// The allocating call stack, innermost first, from the program's call into
  /// CUDA (the shim's own frames left out); empty unless a depth was asked for.
  std::vector<void*> stack;
};

class live_blocks {
 public:
  /// Records `stack_depth` frames of each allocating call stack (0: none).
  explicit live_blocks(unsigned stack_depth) noexcept : stack_depth_{stack_depth} {}

  /// An allocation the program now has; recorded without it when there is no
  /// host memory for the record (counted in untracked()).
  void allocated(void const* ptr, std::size_t bytes, int device, char const* entry_point) noexcept;
  /// A free the program is making of `ptr`, before the block goes back (so
  /// that no new allocation at its address can be taken for it): its record,
  /// to be restored if the free fails; nothing for a pointer not recorded.
  [[nodiscard]] std::optional<live_block> take(void const* ptr) noexcept;
  void restore(live_block&& block) noexcept;
  /// Allocations that were passed to the native allocator (not recorded).
  /// @{
  void passed_through() noexcept { passed_through_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t passed_through_count() const noexcept
  {
    return passed_through_.load(std::memory_order_relaxed);
  }
  /// @}
  /// Every block still allocated, in no particular order. At exit: false
  /// when another thread holds the record's lock for good (a signal handler
  /// that called exit() interrupted it inside a call).
  [[nodiscard]] bool snapshot_at_exit(std::vector<live_block>& out) const;
  /// The `n` largest blocks of `device` now, the largest first (for the
  /// out-of-memory report). Throws std::bad_alloc.
  [[nodiscard]] std::vector<live_block> largest(int device, std::size_t n) const;
  /// Allocations that could not be recorded (no host memory).
  [[nodiscard]] std::uint64_t untracked() const noexcept;

  /// The steady clock the records use, in ns.
  [[nodiscard]] static std::int64_t now_ns() noexcept;

 private:
  unsigned stack_depth_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, live_block> blocks_;
  std::atomic<std::uint64_t> untracked_{0};
  std::atomic<std::uint64_t> passed_through_{0};
};

}  // namespace asyncshim::shim
