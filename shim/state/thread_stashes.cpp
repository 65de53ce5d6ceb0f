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
  /// Written under the lock; read without it by credit_for() (the bytes
  /// first, stored last).
  /// @{
  std::atomic<counter const*> credit_counter{nullptr};
  std::atomic<std::uint64_t> credit{0};
  /// @}
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

bool put_on_credit(entry const& e, counter const& count) noexcept
{
  stash* s = own();
  if (s == nullptr) { return false; }
  std::lock_guard lock{s->lock};
  std::uint64_t const credit = s->credit.load(std::memory_order_relaxed);
  if (s->count == slots || s->credit_counter.load(std::memory_order_relaxed) != &count || credit < e.bytes) {
    return false;
  }
  s->credit.store(credit - e.bytes, std::memory_order_release);
  s->entries[s->count++] = e;
  return true;
}

std::uint64_t spend_credit(counter const& count, std::uint64_t most) noexcept
{
  stash* s = own();
  if (s == nullptr) { return 0; }
  std::lock_guard lock{s->lock};
  if (s->credit_counter.load(std::memory_order_relaxed) != &count) { return 0; }
  std::uint64_t const credit = s->credit.load(std::memory_order_relaxed);
  std::uint64_t const spent = credit < most ? credit : most;
  s->credit.store(credit - spent, std::memory_order_release);
  return spent;
}

void* take(std::uint64_t owner, int device, std::size_t bytes, counter& count) noexcept
{
  stash* s = own();
  if (s == nullptr) { return nullptr; }
  std::lock_guard lock{s->lock};
  for (std::size_t i = s->count; i-- > 0;) {  // the newest first
    entry const& e = s->entries[i];
    if (e.bytes == bytes && e.device == device && e.owner == owner) {
      void* const ptr = e.ptr;
      s->entries[i] = s->entries[--s->count];
      // Its bytes stay counted, as credit, when they fit under the cap.
      std::uint64_t credit = s->credit.load(std::memory_order_relaxed);
      auto* const holder = const_cast<counter*>(s->credit_counter.load(std::memory_order_relaxed));
      if (holder != &count && credit != 0 && bytes <= credit_cap) {
        holder->fetch_sub(credit, std::memory_order_relaxed);  // another device's or cache's: given back
        credit = 0;
      }
      if (credit + bytes <= credit_cap) {
        s->credit_counter.store(&count, std::memory_order_relaxed);
        s->credit.store(credit + bytes, std::memory_order_release);
      } else {
        count.fetch_sub(bytes, std::memory_order_relaxed);
      }
      return ptr;
    }
  }
  return nullptr;
}

std::size_t take_for_room(std::uint64_t owner, int device, std::size_t size, std::uint64_t bytes, entry* out,
                          std::size_t capacity) noexcept
{
  stash* s = own();
  if (s == nullptr) { return 0; }
  std::lock_guard lock{s->lock};
  // A block of the size being kept would only change places with it.
  auto const makes_room = [&](entry const& e) { return e.device == device && e.owner == owner && e.bytes != size; };
  std::uint64_t available = 0;
  std::size_t blocks = 0;
  for (std::size_t i = s->count; i-- > 0 && blocks < capacity && available < bytes;) {
    if (makes_room(s->entries[i])) {
      available += s->entries[i].bytes;
      ++blocks;
    }
  }
  if (available < bytes) { return 0; }
  std::size_t taken = 0;
  for (std::size_t i = s->count; i-- > 0 && taken < blocks;) {
    if (makes_room(s->entries[i])) {
      out[taken++] = s->entries[i];
      s->entries[i] = s->entries[--s->count];
    }
  }
  return taken;
}

std::uint64_t take_all(std::uint64_t owner, int device, bool (*out)(entry const&, void* context), void* context,
                       counter const& count, bool wait) noexcept
{
  std::uint64_t credit = 0;
  for (stash* s = all_stashes.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (wait) {
      s->lock.lock();
    } else if (!lock_briefly(s->lock)) {
      continue;
    }
    std::lock_guard lock{s->lock, std::adopt_lock};
    for (std::size_t i = s->count; i-- > 0;) {
      entry const& e = s->entries[i];
      if (e.device == device && e.owner == owner && out(e, context)) { s->entries[i] = s->entries[--s->count]; }
    }
    if (s->credit_counter.load(std::memory_order_relaxed) == &count) {
      credit += s->credit.load(std::memory_order_relaxed);
      s->credit.store(0, std::memory_order_release);
      s->credit_counter.store(nullptr, std::memory_order_relaxed);
    }
  }
  return credit;
}

std::uint64_t credit_for(counter const& count) noexcept
{
  std::uint64_t credit = 0;
  for (stash* s = all_stashes.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    std::uint64_t const bytes = s->credit.load(std::memory_order_acquire);
    if (bytes != 0 && s->credit_counter.load(std::memory_order_relaxed) == &count) { credit += bytes; }
  }
  return credit;
}

}  // namespace asyncshim::shim::thread_stashes
