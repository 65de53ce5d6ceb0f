// The data of the frees the shim does not hand to the pool at once, per
// device (the policy that decides and issues them: core/deferred_frees.hpp).
// Nothing here calls CUDA: the caller records, queries and destroys the
// events, and frees what comes out to the pool.
//  - free_queue: frees waiting for a fence (device ordering), and frees made
//    while a stream capture is in progress (every ordering);
//  - reuse_cache: freed blocks kept for the next allocation of their size
//    (ASYNCSHIM_REUSE_CACHE): in flight behind their batch's event, idle
//    once it has completed, or kept in the legacy stream's order;
//  - issued_frees: issued batches the device may not have reached yet, for
//    a backlog limit (ASYNCSHIM_FREE_BACKLOG).
#pragma once

#include "state/allocation_registry.hpp"
#include "state/event_batches.hpp"
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

// ---- Frees the program has made that the shim has not yet handed to the pool,
// one queue per device. Two kinds wait here:
//  - under ASYNCSHIM_ORDERING=device, every free: a queue is issued behind
//    one fence once it holds `batch_frees` frees or `batch_bytes` bytes (so a
//    fence, which costs two driver calls per stream it covers, is paid once
//    per batch instead of once per free);
//  - in every ordering, a free made while a stream capture is in progress
//    (docs/design.md, "Stream capture"): urgent, issued as soon as no capture is.
// Until issued, a block is neither the program's (its ownership record is
// marked freed) nor reusable by the pool. Nothing here calls CUDA.
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

// ---- Freed pool blocks kept for reuse under ASYNCSHIM_ORDERING=device, one cache
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
// device reset. A block kept in legacy order goes first to the calling
// thread's stash (state/thread_stashes.hpp), and a hit looks there first: the
// hot path takes no lock another thread takes.
//
// Nothing here calls CUDA: the caller records and queries the events, and
// frees what comes out to the pool. Never allocates on the path of a hit.
class reuse_cache {
 public:
  static constexpr int max_devices = shim::max_devices;

  reuse_cache() noexcept;
  ~reuse_cache();
  reuse_cache(reuse_cache const&) = delete;
  reuse_cache& operator=(reuse_cache const&) = delete;

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

  /// The calling thread's stashed blocks of `device` (none of `bytes`), taken
  /// out into `out` (at most `capacity`) so that a block of `bytes` fits
  /// `limit`; returns how many, 0 when they would not make enough room (none
  /// are taken then). They are for the pool, in the legacy stream's order, as
  /// a flush would give them.
  [[nodiscard]] std::size_t make_room(int device, std::size_t bytes, std::uint64_t limit, block* out,
                                      std::size_t capacity) noexcept;

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

  /// What `device` holds: bytes idle and in flight (the stashes' credit
  /// left out: each stash is looked at).
  [[nodiscard]] std::uint64_t held_bytes(int device) const noexcept;
  /// The same with the stashes' credit, without looking at them: what the
  /// limit counts (for the statistics' peak, asked on every kept free).
  [[nodiscard]] std::uint64_t counted_bytes(int device) const noexcept;
  /// Cheap (no look at the stashes): true also for credit alone, which a
  /// take_all() drops.
  [[nodiscard]] bool holds_anything(int device) const noexcept { return counted_bytes(device) > 0; }

 private:
  struct alignas(64) cache {
    mutable std::mutex mutex;
    event_batches<std::vector<block>> in_flight;
    struct idle_block {
      void* ptr = nullptr;
      bool in_legacy_order = false;
    };
    std::unordered_map<std::size_t, std::vector<idle_block>> idle;  ///< by size
    std::uint64_t idle_bytes = 0;
    std::uint64_t in_flight_bytes = 0;
    /// idle_bytes + in_flight_bytes without the lock (memory info, the release
    /// paths' first look).
    std::atomic<std::uint64_t> held{0};
    /// The bytes of this device's blocks in threads' stashes and the stashes'
    /// credit for them (state/thread_stashes.hpp), on a line of its own.
    alignas(64) std::atomic<std::uint64_t> stashed{0};
    void update_held() noexcept;
  };
  [[nodiscard]] cache* of(int device) noexcept;
  [[nodiscard]] cache const* of(int device) const noexcept;

  std::array<cache, max_devices> caches_;
  std::uint64_t const serial_;  ///< names this cache's blocks in the threads' stashes
};

// ---- The frees of each device issued on the shim's stream whose work the device
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
  struct alignas(64) device_batches {
    std::mutex mutex;
    event_batches<std::uint64_t> batches;  ///< each with its bytes
    std::atomic<std::uint64_t> bytes{0};   ///< read without the lock
  };
  [[nodiscard]] device_batches* of(int device) noexcept;

  std::array<device_batches, max_devices> devices_;
};

}  // namespace asyncshim::shim
