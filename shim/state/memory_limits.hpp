// Each device's memory limit (ASYNCSHIM_MEMORY_LIMIT) and what it counts
// besides the pool's reservation: the blocks the shim passed to the native
// allocator on that device (a device without a pool, observe mode).
//
// Invariant: a device's limit is resolved once, from its total memory, and
// never changes (0: none); native_bytes(device) is the sum of the bytes of
// the native blocks recorded for it, each recorded from its allocation to its
// free. Nothing here calls CUDA.
#pragma once

#include "support/device_limit.hpp"

#include <asyncshim/config/settings.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace asyncshim::shim {

class memory_limits {
 public:
  explicit memory_limits(config::memory_limits const& spec) : spec_(spec) {}

  /// Whether any device may have a limit (cheap: the allocation paths ask first).
  [[nodiscard]] bool any() const noexcept { return any_; }
  /// The limit of `device` in bytes, resolved on the first ask from its
  /// total memory (`total_bytes`, read by the caller); 0: none.
  [[nodiscard]] std::uint64_t resolve(int device, std::uint64_t total_bytes) noexcept;
  /// The limit as resolved so far (0: none); nothing before it is resolved.
  [[nodiscard]] std::optional<std::uint64_t> limit(int device) const noexcept;

  struct native_block {
    std::size_t bytes = 0;
    int device = 0;
  };
  /// Records a native block; false when there is no host memory for it.
  [[nodiscard]] bool add_native(void const* ptr, native_block block) noexcept;
  /// The record of a native block, removed; nothing for any other pointer.
  [[nodiscard]] std::optional<native_block> take_native(void const* ptr) noexcept;
  [[nodiscard]] std::uint64_t native_bytes(int device) const noexcept;
  /// The native blocks of `device` went with its context (a device reset).
  void forget_native(int device) noexcept;

 private:
  /// Stored in limits_: 0 until resolved, then the limit or `none`.
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  config::memory_limits const& spec_;
  bool const any_ = spec_.any();
  std::array<std::atomic<std::uint64_t>, max_devices> limits_{};
  std::array<std::atomic<std::uint64_t>, max_devices> native_bytes_{};
  std::mutex native_mutex_;
  std::unordered_map<void const*, native_block> native_;
};

}  // namespace asyncshim::shim
