// Reaching libraries that are already loaded: the C library's own dlsym,
// finding a loaded object by its path, taking functions from it, and keeping
// a complete search once found (cuda/runtime.cpp, cuda/driver.cpp, the
// lookup redirection).
#pragma once

#include <atomic>
#include <new>

namespace asyncshim::shim {

/// The C library's dlsym, for the shim's own lookups. libasyncshim.so exports
/// a dlsym of its own (abi/dlsym.cpp); calling that from inside the shim would
/// substitute the very driver functions the shim needs to reach. Resolved
/// once, with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), falling back to
/// "GLIBC_2.2.5" (glibc before 2.34). Called from shim code, RTLD_NEXT means
/// "after libasyncshim.so".
[[nodiscard]] void* real_dlsym(void* handle, char const* name) noexcept;

/// A handle (RTLD_NOLOAD: nothing new is loaded) to the first loaded object
/// whose path `matches`, or null. The path is copied out of dl_iterate_phdr
/// first: dlopen must not be called while it holds the loader's lock. No
/// failing dlopen is made, so dlerror() is left as the program left it.
[[nodiscard]] void* loaded_library(bool (*matches)(char const* path)) noexcept;

/// `out` = the function `name` of `library`, through the C library's dlsym.
template <class Fn>
void take_function(void* library, char const* name, Fn& out) noexcept
{
  out = reinterpret_cast<Fn>(real_dlsym(library, name));
}

/// "Find it on first use, and keep it once found": the pattern behind
/// runtime(), driver() and the replacement table. A failed search is not
/// kept, so a library the program loads later is still found.
///
/// No lock is held while searching: a search calls dlopen/dlsym (which take
/// the loader's lock) and foreign code, and a lock of ours held across them
/// can deadlock against a library constructor running under the loader's lock.
/// Searches give the same answer on every thread, so threads that race simply
/// search twice and the first complete answer is published.
///
/// `Tag` makes each use its own statics; `search` returns a Functions whose
/// found() says whether it is complete.
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

extern "C" {
/// For abi/dlsym.cpp's assembly: the real dlsym once known, and the function
/// that finds it.
/// @{
extern void* asyncshim_real_dlsym_pointer;
void* asyncshim_resolve_real_dlsym() noexcept;
/// @}
}
