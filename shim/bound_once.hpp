// "Find it on first use, and keep it once found": the pattern behind
// runtime() and driver(). A failed search is not kept, so a library the
// program loads later is still found. No allocation, no exception.
#pragma once

#include <pthread.h>

#include <atomic>

namespace asyncshim::shim {

// `Tag` makes each use its own set of statics; `search` returns a Functions
// whose found() says whether it is complete.
template <class Tag, class Functions, class Search>
Functions const& bound_once(Search search) noexcept
{
  static std::atomic<Functions const*> bound{nullptr};
  static Functions storage;
  static Functions const none;
  static pthread_mutex_t binding = PTHREAD_MUTEX_INITIALIZER;  // never throws, unlike std::mutex
  if (Functions const* functions = bound.load(std::memory_order_acquire)) { return *functions; }
  pthread_mutex_lock(&binding);
  if (bound.load(std::memory_order_relaxed) == nullptr) {
    Functions const candidate = search();
    if (candidate.found()) {
      storage = candidate;
      bound.store(&storage, std::memory_order_release);
    }
  }
  pthread_mutex_unlock(&binding);
  Functions const* functions = bound.load(std::memory_order_acquire);
  return functions != nullptr ? *functions : none;
}

}  // namespace asyncshim::shim
