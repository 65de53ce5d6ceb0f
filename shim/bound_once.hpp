// "Find it on first use, and keep it once found": the pattern behind
// runtime(), driver() and the replacement table. A failed search is not
// kept, so a library the program loads later is still found.
//
// No lock is held while searching: a search calls dlopen/dlsym (which take
// the loader's lock) and foreign code, and a lock of ours held across them
// can deadlock against a library constructor running under the loader's lock.
// Searches give the same answer on every thread, so threads that race simply
// search twice and the first complete answer is published.
#pragma once

#include <atomic>
#include <new>

namespace asyncshim::shim {

// `Tag` makes each use its own statics; `search` returns a Functions whose
// found() says whether it is complete.
template <class Tag, class Functions, class Search>
Functions const& bound_once(Search search) noexcept
{
  static std::atomic<Functions const*> bound{nullptr};
  static Functions const none;
  if (Functions const* functions = bound.load(std::memory_order_acquire)) { return *functions; }
  Functions const candidate = search();
  if (!candidate.found()) { return none; }
  auto* mine = new (std::nothrow) Functions(candidate);  // kept for the life of the process
  if (mine == nullptr) { return none; }
  Functions const* expected = nullptr;
  if (!bound.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    delete mine;  // another thread published first
    return *expected;
  }
  return *mine;
}

}  // namespace asyncshim::shim
