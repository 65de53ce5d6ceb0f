// Freed pool blocks kept for reuse under ASYNCSHIM_ORDERING=device, one cache
// per device (README, "Choosing an ordering"; docs/design.md, "Reuse cache").
//
// A batch of queued frees, once issued behind its fence, does not go back to
// the pool: it waits here *in flight*, with an event recorded on the shim's
// stream after the fence. Once that event has completed, all the work the
// program submitted before each of the batch's frees has finished, so its
// blocks are *idle*: a later cudaMalloc of exactly the same size gets one
// with no CUDA call at all, and it is as idle and usable from any stream as
// a block the pool hands out. A block freed in the legacy stream's order
// (state/stream_tracker.hpp) is kept at once, *in legacy order*: like the
// pool's own reuse on the legacy stream, the next allocation there may have
// it, and it goes to the pool only on the legacy stream, after the work
// before its free. Idle blocks beyond the device's limit
// (ASYNCSHIM_REUSE_CACHE) are handed to the caller for the pool instead.
// Everything here goes back to the pool when an allocation would fail, when
// the pool gives memory back (idle release, a device running short) and at a
// device reset.
//
// Nothing here calls CUDA: the caller records and queries the events, and
// frees what comes out to the pool. Never allocates on the path of a hit.
#pragma once

#include "support/device_limit.hpp"

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace asyncshim::shim {

class reuse_cache {
 public:
  static constexpr int max_devices = shim::max_devices;

  struct block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    /// Freed in the legacy stream's order: to the pool on the legacy stream.
    bool in_legacy_order = false;
  };

  /// An issued batch, whose fence completes when `done` has. False when there
  /// is no host memory to remember it: the caller then frees the blocks to
  /// the pool itself.
  [[nodiscard]] bool add_in_flight(int device, CUevent done, block const* blocks, std::size_t count) noexcept;

  /// The oldest batch still in flight: its event, and its serial number, which
  /// names it (an event is used again for a later batch once its batch has
  /// completed, so it does not). Batches complete in the order they were added
  /// (their events are recorded on one stream).
  /// @{
  struct in_flight_batch {
    CUevent done = nullptr;  ///< null: nothing in flight
    std::uint64_t serial = 0;
  };
  [[nodiscard]] in_flight_batch oldest_in_flight(int device) noexcept;
  /// @}
  /// Batch `serial` has completed: its blocks become idle while the idle
  /// bytes stay within `limit`; the others are appended to `for_the_pool`
  /// (capacity permitting: the caller reserves room for a whole batch). Its
  /// event is the caller's again. False when that batch is no longer the
  /// oldest in flight (another thread moved it, or a flush took it): the
  /// event is then not the caller's.
  [[nodiscard]] bool completed(int device, std::uint64_t serial, std::uint64_t limit,
                               std::vector<block>& for_the_pool) noexcept;

  /// Keeps `b`, freed in the legacy stream's order, as an idle block while the
  /// idle bytes stay within `limit`; false when it does not fit (the caller
  /// frees it to the pool on the legacy stream).
  [[nodiscard]] bool keep_in_legacy_order(int device, block b, std::uint64_t limit) noexcept;

  /// Events of completed batches, kept for the next batches of `device`.
  [[nodiscard]] CUevent spare_event(int device) noexcept;
  /// False when there is no room to keep it (the caller destroys it).
  [[nodiscard]] bool keep_spare_event(int device, CUevent event) noexcept;

  /// An idle block of exactly `bytes`, or null.
  [[nodiscard]] void* take(int device, std::size_t bytes) noexcept;

  /// Everything `device` holds, in flight or idle, for the pool. With
  /// `events`, also every event (the batches' and the spare ones: their
  /// context is going); without, the batches' events stay as spares (another
  /// thread may be asking one of them whether its batch has completed).
  void take_all(int device, std::vector<block>& blocks, std::vector<CUevent>* events) noexcept;

  /// Forgets everything `device` holds, blocks and events, without handing
  /// anything over and without allocating: for a device reset whose pool (and
  /// context) goes with them when they could not be taken.
  void forget(int device) noexcept;

  /// What `device` holds: bytes idle and in flight.
  [[nodiscard]] std::uint64_t held_bytes(int device) const noexcept;
  [[nodiscard]] bool holds_anything(int device) const noexcept { return held_bytes(device) > 0; }

 private:
  struct batch {
    CUevent done = nullptr;
    std::uint64_t serial = 0;
    std::vector<block> blocks;
  };
  struct alignas(64) cache {
    mutable std::mutex mutex;
    std::deque<batch> in_flight;
    struct idle_block {
      void* ptr = nullptr;
      bool in_legacy_order = false;
    };
    std::unordered_map<std::size_t, std::vector<idle_block>> idle;  ///< by size
    std::uint64_t idle_bytes = 0;
    std::uint64_t in_flight_bytes = 0;
    std::vector<CUevent> spare_events;
    std::uint64_t next_serial = 1;
    /// held_bytes without the lock (memory info, the release paths' first look).
    std::atomic<std::uint64_t> held{0};
    void update_held() noexcept;
  };
  [[nodiscard]] cache* of(int device) noexcept;
  [[nodiscard]] cache const* of(int device) const noexcept;

  std::array<cache, max_devices> caches_;
};

}  // namespace asyncshim::shim
