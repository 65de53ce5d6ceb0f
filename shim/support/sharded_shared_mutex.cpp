#include "support/sharded_shared_mutex.hpp"

namespace asyncshim::shim {
namespace {

std::atomic<unsigned> next_lock{0};
std::atomic<unsigned> next_thread{0};

// Each thread's slot, and how deep it reads each lock (initial-exec: one load
// per call, as the other per-call thread-locals).
struct reading {
  unsigned slot = ~0U;
  std::array<std::uint32_t, sharded_shared_mutex::max_locks> depth{};
};
__attribute__((tls_model("initial-exec"))) thread_local reading this_thread;

unsigned slot_of_this_thread(unsigned slots) noexcept
{
  if (this_thread.slot == ~0U) { this_thread.slot = next_thread.fetch_add(1, std::memory_order_relaxed) % slots; }
  return this_thread.slot;
}

}  // namespace

sharded_shared_mutex::sharded_shared_mutex() noexcept : id_(next_lock.fetch_add(1, std::memory_order_relaxed)) {}

void sharded_shared_mutex::lock_shared() noexcept
{
  std::atomic<std::uint32_t>& mine = slots_[slot_of_this_thread(slots)].readers;
  if (id_ < max_locks && this_thread.depth[id_]++ > 0) {  // already reading: a writer waits for it anyway
    mine.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (;;) {
    mine.fetch_add(1, std::memory_order_seq_cst);
    if (!writer_.load(std::memory_order_seq_cst)) { return; }
    mine.fetch_sub(1, std::memory_order_release);
    std::lock_guard wait_for_the_writer{writers_};
  }
}

void sharded_shared_mutex::unlock_shared() noexcept
{
  if (id_ < max_locks) { --this_thread.depth[id_]; }
  slots_[slot_of_this_thread(slots)].readers.fetch_sub(1, std::memory_order_release);
}

void sharded_shared_mutex::lock() noexcept
{
  writers_.lock();
  writer_.store(true, std::memory_order_seq_cst);
  for (slot& s : slots_) {
    unsigned spins = 0;
    while (s.readers.load(std::memory_order_seq_cst) != 0) {
      if (++spins > 64) { sched_yield(); }
    }
  }
}

void sharded_shared_mutex::unlock() noexcept
{
  writer_.store(false, std::memory_order_release);
  writers_.unlock();
}

}  // namespace asyncshim::shim
