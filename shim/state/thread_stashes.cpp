#include "state/thread_stashes.hpp"

#include "support/spin_lock.hpp"

#include <sched.h>

#include <array>
#include <atomic>
#include <mutex>
#include <new>

namespace asyncshim::shim::thread_stashes {
namespace {

struct stash {
  spin_lock lock;
  std::atomic<bool> in_use{true};
  stash* next = nullptr;  ///< set once, before the stash is published
  std::size_t count = 0;
  std::array<entry, slots> entries{};
};

// Every stash ever made, newest first; pushed with a CAS, never unlinked.
std::atomic<stash*> all_stashes{nullptr};

// A stash no thread uses any more, or a new one.
stash* claim() noexcept
{
  for (stash* s = all_stashes.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    bool idle = false;
    if (!s->in_use.load(std::memory_order_relaxed) &&
        s->in_use.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
      return s;
    }
  }
  auto* s = new (std::nothrow) stash;
  if (s == nullptr) { return nullptr; }
  s->next = all_stashes.load(std::memory_order_relaxed);
  while (!all_stashes.compare_exchange_weak(s->next, s, std::memory_order_release, std::memory_order_relaxed)) {}
  return s;
}

// The calling thread's stash, handed on when the thread ends.
struct holder {
  stash* mine = nullptr;
  bool tried = false;  // no host memory for one: not asked again
  ~holder()
  {
    if (mine != nullptr) { mine->in_use.store(false, std::memory_order_release); }
  }
};
// Read on every hit and kept free: initial-exec, one load (as calling_thread.cpp).
__attribute__((tls_model("initial-exec"))) thread_local holder this_thread;

stash* own() noexcept
{
  if (this_thread.mine == nullptr && !this_thread.tried) {
    this_thread.tried = true;
    this_thread.mine = claim();
  }
  return this_thread.mine;
}

// Only a flush or a reset waits for another thread's stash, which its thread
// holds for a few instructions; a lock still held after this many tries was
// copied held into a forked child, whose other threads are gone.
bool lock_briefly(spin_lock& lock) noexcept
{
  for (int tries = 0; tries < 1000; ++tries) {
    if (lock.try_lock()) { return true; }
    sched_yield();
  }
  return false;
}

}  // namespace

bool put(entry const& e) noexcept
{
  stash* s = own();
  if (s == nullptr) { return false; }
  std::lock_guard lock{s->lock};
  if (s->count == slots) { return false; }
  s->entries[s->count++] = e;
  return true;
}

void* take(std::uint64_t owner, int device, std::size_t bytes) noexcept
{
  stash* s = own();
  if (s == nullptr) { return nullptr; }
  std::lock_guard lock{s->lock};
  for (std::size_t i = s->count; i-- > 0;) {  // the newest first
    entry const& e = s->entries[i];
    if (e.bytes == bytes && e.device == device && e.owner == owner) {
      void* const ptr = e.ptr;
      s->entries[i] = s->entries[--s->count];
      return ptr;
    }
  }
  return nullptr;
}

void take_all(std::uint64_t owner, int device, bool (*out)(entry const&, void* context), void* context) noexcept
{
  for (stash* s = all_stashes.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (!lock_briefly(s->lock)) { continue; }
    std::lock_guard lock{s->lock, std::adopt_lock};
    for (std::size_t i = s->count; i-- > 0;) {
      entry const& e = s->entries[i];
      if (e.device == device && e.owner == owner && out(e, context)) { s->entries[i] = s->entries[--s->count]; }
    }
  }
}

}  // namespace asyncshim::shim::thread_stashes
