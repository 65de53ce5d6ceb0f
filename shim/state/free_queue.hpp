// Frees the program has made that the shim has not yet handed to the pool,
// one queue per device. Two kinds wait here:
//  - under ASYNCSHIM_ORDERING=device, every free: a queue is issued behind
//    one fence once it holds `batch_frees` frees or `batch_bytes` bytes (so a
//    fence, which costs two driver calls per stream it covers, is paid once
//    per batch instead of once per free);
//  - in every ordering, a free made while a stream capture is in progress
//    (docs/design.md, "Stream capture"): urgent, issued as soon as no capture is.
// Until issued, a block is neither the program's (its ownership record is
// marked freed) nor reusable by the pool. Nothing here calls CUDA.
#pragma once

#include "state/allocation_registry.hpp"
#include "support/device_limit.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace asyncshim::shim {

class free_queue {
 public:
  static constexpr int max_devices = shim::max_devices;
  /// A batch: enough frees to make the fence's cost small next to the frees
  /// themselves, few enough bytes that holding them back never matters (an
  /// allocation that finds the pool exhausted issues the queue first).
  /// @{
  static constexpr std::size_t batch_frees = 64;
  static constexpr std::size_t batch_bytes = std::size_t{64} << 20;
  /// @}

  struct entry {
    void* ptr = nullptr;
    allocation_record record;
    int failures = 0;  ///< issuing it failed this many times
  };

  /// Queues a free; true when the device's queue is now due (a full batch,
  /// or urgent). False from `added` when there is no host memory to remember
  /// it (the caller then fails the free, and the block stays allocated).
  /// @{
  struct add_result {
    bool added = false;
    bool due = false;
  };
  [[nodiscard]] add_result add(entry const& e, bool urgent) noexcept;
  /// @}

  /// The devices whose queue holds an urgent entry (or did, until the queue
  /// empties), as a bit mask.
  [[nodiscard]] std::uint64_t urgent_devices() const noexcept
  {
    return urgent_devices_.load(std::memory_order_acquire);
  }

  /// Moves up to `capacity` of the entries queued for `device` to `out` (the
  /// caller's buffer: taking never allocates) and returns how many; the
  /// device's bits in both masks clear when its queue is empty.
  [[nodiscard]] std::size_t take(int device, entry* out, std::size_t capacity) noexcept;
  /// Forgets everything queued for `device` (its pool and blocks are gone).
  void drop(int device) noexcept;

  /// The bytes queued for `device`: pool memory the program has freed that
  /// the pool does not have back yet.
  [[nodiscard]] std::size_t queued_bytes(int device) noexcept;

  /// The devices whose queue is not empty, as a bit mask (cheap: one atomic load).
  [[nodiscard]] std::uint64_t queued_devices() const noexcept
  {
    return queued_devices_.load(std::memory_order_acquire);
  }

 private:
  struct alignas(64) queue {
    std::mutex mutex;
    std::vector<entry> entries;
    std::size_t bytes = 0;
  };

  /// The queue is empty: its bytes and the device's bits go (under its lock).
  void mark_empty(int device, queue& q) noexcept;

  std::array<queue, max_devices> queues_;
  /// A device's bits are set and cleared only under its queue's lock: the
  /// queued bit is set exactly while the queue is not empty.
  /// @{
  std::atomic<std::uint64_t> urgent_devices_{0};
  std::atomic<std::uint64_t> queued_devices_{0};
  /// @}
};

}  // namespace asyncshim::shim
