// Each thread's stash of a few idle blocks freed in the legacy stream's
// order, in front of the reuse cache's shared lists (state/deferred_frees.hpp):
// a hit or a kept free takes only the calling thread's own stash lock, which
// another thread takes only to empty the stash (a flush, a reset).
//
// Invariant: a block is in at most one place, a stash or the cache's shared
// lists, and a stash entry names the cache that owns it (owner) and the
// device. Stashes are never freed: a thread that ends leaves its stash, and
// the blocks in it, to the next thread that needs one, and a flush finds
// them all the same. Nothing here calls CUDA or allocates on a hit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace asyncshim::shim::thread_stashes {

struct entry {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint64_t owner = 0;  ///< the reuse cache's serial number (0: none)
  int device = 0;
};

/// How many blocks one stash holds.
inline constexpr std::size_t slots = 8;

/// Into the calling thread's stash; false when it is full (or no stash could
/// be made: no host memory).
[[nodiscard]] bool put(entry const& e) noexcept;

/// A block of exactly `bytes` of `owner`'s `device` from the calling thread's
/// stash, taken out; null when there is none.
[[nodiscard]] void* take(std::uint64_t owner, int device, std::size_t bytes) noexcept;

/// Every stash's blocks of `owner`'s `device`, each given to `out`, which
/// returns false to leave it where it is (no room to take it). A stash whose
/// lock stays held (copied held into a forked child) is left alone.
void take_all(std::uint64_t owner, int device, bool (*out)(entry const&, void* context), void* context) noexcept;

}  // namespace asyncshim::shim::thread_stashes
