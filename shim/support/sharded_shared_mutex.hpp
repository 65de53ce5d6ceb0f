// sharded_shared_mutex.hpp: a reader-writer lock for locks taken shared on
// every allocation and free and exclusively almost never (a capture
// beginning, a stream made or destroyed, a device reset). A reader touches
// only its thread's slot, so readers on many threads share no cache line;
// a writer waits for every slot to drain.
//
// Invariant: a reader counts itself in its slot before it looks for a
// writer, and a writer announces itself before it looks at the slots (both
// sequentially consistent), so either the reader sees the writer and backs
// off, or the writer sees the reader and waits for it. A thread already
// reading the same lock reads again without looking (a writer waiting for
// it would otherwise wait for good). A reader that backs off sleeps on the
// writers' mutex, which a writer holds throughout.
#pragma once

#include <sched.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace asyncshim::shim {

class sharded_shared_mutex {
 public:
  /// How many locks of a process each thread counts its reads of; a lock
  /// made after them (only in tests that make many) is not read again
  /// without looking, so a thread must not read it twice.
  static constexpr unsigned max_locks = 8;

  sharded_shared_mutex() noexcept;
  sharded_shared_mutex(sharded_shared_mutex const&) = delete;
  sharded_shared_mutex& operator=(sharded_shared_mutex const&) = delete;

  void lock_shared() noexcept;
  void unlock_shared() noexcept;
  /// Exclusive; never taken by a thread that reads this lock.
  void lock() noexcept;
  void unlock() noexcept;

 private:
  static constexpr unsigned slots = 64;
  struct alignas(64) slot {
    std::atomic<std::uint32_t> readers{0};
  };

  std::array<slot, slots> slots_;
  alignas(64) std::atomic<bool> writer_{false};
  std::mutex writers_;
  unsigned const id_;
};

}  // namespace asyncshim::shim
