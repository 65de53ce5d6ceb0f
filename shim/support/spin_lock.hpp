// spin_lock.hpp: a lock for critical sections of a few dozen instructions
// that call nothing (no CUDA, no host allocation in steady state). Its
// uncontended lock and unlock are one atomic exchange and one release store,
// where a mutex pays two locked operations and two library calls. A waiter
// spins briefly, then yields its CPU, so that a holder that was preempted
// gets to run (threads may outnumber CPUs).
#pragma once

#include <sched.h>

#include <atomic>

namespace asyncshim::shim {

class spin_lock {
 public:
  void lock() noexcept
  {
    unsigned spins = 0;
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          relax();
        } else {
          sched_yield();
        }
      }
    }
  }
  [[nodiscard]] bool try_lock() noexcept
  {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static void relax() noexcept
  {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }

  std::atomic<bool> locked_{false};
};

}  // namespace asyncshim::shim
