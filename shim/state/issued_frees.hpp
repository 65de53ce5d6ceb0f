// The frees of each device issued on the shim's stream whose work the device
// may not have caught up with yet, for ASYNCSHIM_FREE_BACKLOG (README,
// "Choosing an ordering"; docs/design.md, "The free backlog"). Under device
// ordering a freed block comes back only once the device has finished the
// work submitted before its free; a host that runs far ahead of the device
// keeps that much more memory in the pool. With a backlog limit, each issued
// batch is remembered here behind an event recorded on the shim's stream
// after its frees, and a free that finds more than the limit waiting (queued
// and issued) waits for the oldest batches, as native cudaFree waits for the
// device.
//
// Nothing here calls CUDA: the caller records, waits for and destroys the
// events. Batches complete in the order they were added (one stream).
#pragma once

#include "support/device_limit.hpp"

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace asyncshim::shim {

class issued_frees {
 public:
  static constexpr int max_devices = shim::max_devices;

  /// A batch of `bytes` issued on the shim's stream of `device`, whose frees
  /// have completed when `done` has. False when there is no host memory to
  /// remember it (the caller then destroys or keeps the event; the batch is
  /// not waited for).
  [[nodiscard]] bool add(int device, CUevent done, std::uint64_t bytes) noexcept;

  /// The oldest batch not yet seen to complete, named by its serial number
  /// (its event is recorded again for a later batch once it is done).
  /// @{
  struct batch_name {
    CUevent done = nullptr;  ///< null: none
    std::uint64_t serial = 0;
  };
  [[nodiscard]] batch_name oldest(int device) noexcept;
  /// @}
  /// Batch `serial` has completed: forgotten, its event kept for a later
  /// batch. False when it is no longer the oldest (another thread saw it
  /// complete first, or a reset took it).
  bool completed(int device, std::uint64_t serial) noexcept;

  /// An event of a completed batch, for the next batch of `device`; null when none.
  [[nodiscard]] CUevent spare_event(int device) noexcept;
  /// An event that could not be used for a batch, kept for a later one (left
  /// to its context when there is no room).
  void keep_spare_event(int device, CUevent event) noexcept;

  /// The bytes of the batches of `device` not yet seen to complete.
  [[nodiscard]] std::uint64_t bytes(int device) const noexcept;

  /// A device reset: every event of `device` (batches' and spare ones) goes to
  /// `events` for the caller to destroy, and everything is forgotten. Without
  /// host memory for the list the events are forgotten without it (their
  /// context goes anyway).
  void take_all(int device, std::vector<CUevent>& events) noexcept;

 private:
  struct batch {
    CUevent done = nullptr;
    std::uint64_t serial = 0;
    std::uint64_t bytes = 0;
  };
  struct alignas(64) device_batches {
    std::mutex mutex;
    std::deque<batch> batches;
    std::vector<CUevent> spare_events;
    std::uint64_t next_serial = 1;
    std::atomic<std::uint64_t> bytes{0};  ///< read without the lock
  };
  [[nodiscard]] device_batches* of(int device) noexcept;

  std::array<device_batches, max_devices> devices_;
};

}  // namespace asyncshim::shim
