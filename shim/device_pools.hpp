// One cuda_async_memory_resource per device, created on that device's first
// allocation with the configured settings. A device whose pool cannot be made
// (no pool support, an export handle type it lacks, the initial size not
// available, ...) is said so once and then passes through to the native
// allocator for the rest of the process.
#pragma once

#include <asyncshim/config/settings.hpp>
#include <asyncshim/cuda_async_memory_resource.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

namespace asyncshim::shim {

class device_pools {
 public:
  static constexpr int max_devices = 64;

  explicit device_pools(config::settings const& settings) : settings_{settings} {}

  // The pool of `device`, which must be the calling thread's current device;
  // nullptr when that device's allocations go to the native allocator.
  [[nodiscard]] cuda_async_memory_resource* get(int device) noexcept;
  // The pool of `device` if it has been created, without creating it.
  [[nodiscard]] cuda_async_memory_resource* existing(int device) const noexcept;

 private:
  enum class state : int { not_created, ready, passthrough };
  struct slot {
    std::atomic<state> current{state::not_created};
    std::mutex creation;
    std::unique_ptr<cuda_async_memory_resource> pool;
  };

  void create(int device, slot& s) noexcept;

  config::settings const& settings_;
  std::array<slot, max_devices> slots_;
};

}  // namespace asyncshim::shim
