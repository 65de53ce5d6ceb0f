// One cuda_async_memory_resource per device, created on that device's first
// allocation with the configured settings, together with what the shim
// orders its frees with on that device: a stream of its own and an event for
// the legacy stream. The pool starts empty unless ASYNCSHIM_INITIAL_POOL_SIZE
// says otherwise; an initial size the device cannot give is said so once and
// the pool starts empty. A device whose pool cannot be made at all (no pool
// support, an export handle type it lacks, no memory for the pool itself) is
// said so once and then passes through to the native allocator for the rest
// of the process. A device reset retires the pool; the next allocation makes
// a new one.
#pragma once

#include "support/device_limit.hpp"

#include "state/memory_limits.hpp"

#include <asyncshim/config/settings.hpp>
#include <asyncshim/cuda_async_memory_resource.hpp>

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace asyncshim::shim {

/// The shim's own stream work on one device. All three live in the context
/// that was current when the pool was made (the device's primary context for
/// the runtime).
struct device_streams {
  CUcontext context = nullptr;
  /// Where the shim frees (device and sync ordering), and allocates while a
  /// stream capture is in progress. The program never sees it, so no capture
  /// can absorb its work.
  CUstream own = nullptr;
  CUevent legacy_fence = nullptr;  ///< recorded on the legacy stream by each fenced free
  /// Recorded on the legacy stream by each in-order free: for the program's
  /// idle non-blocking streams to wait for (stream_tracker::free_in_order),
  /// and as the action there of a block the reuse cache keeps. Not the
  /// fence's event, whose record and wait take turns under the fence lock.
  CUevent in_order_barrier = nullptr;
};

class device_pools {
 public:
  static constexpr int max_devices = shim::max_devices;

  /// `limits`: where each pool's bound (ASYNCSHIM_MEMORY_LIMIT) is resolved;
  /// null: no pool is bounded.
  explicit device_pools(config::settings const& settings, memory_limits* limits = nullptr)
      : settings_{settings}, limits_{limits}
  {
  }

  /// The pool of `device`, which must be the calling thread's current device;
  /// nullptr when that device's allocations go to the native allocator.
  [[nodiscard]] cuda_async_memory_resource* get(int device) noexcept;
  /// The pool of `device` if it has been created, without creating it.
  [[nodiscard]] cuda_async_memory_resource* existing(int device) const noexcept;
  /// The shim's streams on `device`, which has a pool (get/existing returned one).
  [[nodiscard]] device_streams const& streams(int device) const noexcept;
  /// The device whose pool lives in `context`, or -1 (no pool there, or not
  /// yet made). Lets an allocation find its device without asking the
  /// runtime: a thread inside the runtime when another forks leaves the
  /// runtime's lock held in the child, whose exit then hangs.
  [[nodiscard]] int device_of_context(CUcontext context) const noexcept;
  /// What the pool of `device` keeps when it gives unused memory back
  /// (core/memory_release.hpp): the release threshold or the initial size the user
  /// set, resolved for the device, else 0.
  [[nodiscard]] std::uint64_t kept_bytes(int device) const noexcept;
  /// The most the reuse cache of `device` keeps idle (ASYNCSHIM_REUSE_CACHE,
  /// resolved for the device; 0 unless the ordering is device, and without a pool).
  [[nodiscard]] std::uint64_t reuse_limit(int device) const noexcept;
  /// Whether the pool of `device` could not be bounded by its memory limit
  /// (the driver refused the pool's maxSize): each allocation is then checked.
  [[nodiscard]] bool unbounded(int device) const noexcept;
  /// The most freed memory of `device` that may wait for the device to catch
  /// up (ASYNCSHIM_FREE_BACKLOG, resolved for the device); no_backlog_limit
  /// unless it was set and the ordering is device, and without a pool.
  /// @{
  static constexpr std::uint64_t no_backlog_limit = ~std::uint64_t{0};
  [[nodiscard]] std::uint64_t backlog_limit(int device) const noexcept;
  /// @}

  /// The handle type the pool of `device` was made with (ASYNCSHIM_EXPORT_HANDLE_TYPE,
  /// auto resolved for the device); none for a device without a pool.
  [[nodiscard]] config::handle_type export_handle_type(int device) const noexcept;

  /// The device is being reset: its pool (whose memory the caller has freed)
  /// is destroyed and forgotten, with the shim's stream and event there.
  void retire(int device) noexcept;

 private:
  enum class state : int { not_created, ready, passthrough };
  struct slot {
    std::atomic<state> current{state::not_created};
    std::mutex creation;
    std::unique_ptr<cuda_async_memory_resource> pool;
    device_streams streams;
    std::uint64_t kept = 0;
    std::uint64_t reuse_limit = 0;
    bool unbounded = false;
    std::uint64_t backlog_limit = no_backlog_limit;
    config::handle_type export_type = config::handle_type::none;
    /// Pools of earlier lives of the device (before a reset); kept, never
    /// used: a thread may still hold a pointer to one.
    std::vector<std::unique_ptr<cuda_async_memory_resource>> retired;
  };

  void create(int device, slot& s) noexcept;

  config::settings const& settings_;
  memory_limits* const limits_;
  std::array<slot, max_devices> slots_;
};

}  // namespace asyncshim::shim
