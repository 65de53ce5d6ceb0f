#include "fork_state.hpp"

#include <pthread.h>

#include <atomic>

namespace asyncshim::shim {
namespace {

// Constant-initialized: no load-time code.
std::atomic<bool> forked_child{false};
std::atomic<bool> watching{false};

void mark_forked_child() { forked_child.store(true, std::memory_order_relaxed); }

}  // namespace

bool in_forked_child() noexcept { return forked_child.load(std::memory_order_relaxed); }

void watch_for_fork() noexcept
{
  if (watching.load(std::memory_order_acquire)) { return; }
  bool expected = false;
  if (watching.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
    (void)pthread_atfork(nullptr, nullptr, mark_forked_child);
  }
}

}  // namespace asyncshim::shim
