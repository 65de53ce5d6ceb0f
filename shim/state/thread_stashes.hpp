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
//
// Every stashed byte is counted in its cache's counter of the device
// (`counter`), and so is each stash's credit: bytes counted but not stashed,
// at most credit_cap, for one counter at a time. A block taken from the stash
// leaves its bytes as credit and the next block kept there spends it, so that
// a thread's allocations and frees of one size write no shared counter; a
// counter therefore never counts less than what is stashed.
#pragma once

#include <atomic>
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

/// The most credit a stash keeps: what other threads' frees may find
/// counted against the cache's limit without being held, per thread.
inline constexpr std::size_t credit_cap = std::size_t{1} << 20;

using counter = std::atomic<std::uint64_t>;

/// Into the calling thread's stash; false when it is full (or no stash could
/// be made: no host memory). The caller has counted it in its counter.
[[nodiscard]] bool put(entry const& e) noexcept;

/// Into the calling thread's stash on its credit for `count` (which then
/// counts it already); false when the credit is short or the stash full.
[[nodiscard]] bool put_on_credit(entry const& e, counter const& count) noexcept;

/// Up to `most` bytes of the calling thread's credit for `count`, taken from
/// the stash: `count` still counts them, now for the caller.
[[nodiscard]] std::uint64_t spend_credit(counter const& count, std::uint64_t most) noexcept;

/// A block of exactly `bytes` of `owner`'s `device` from the calling thread's
/// stash, taken out; null when there is none. Its bytes become credit for
/// `count`, or are taken off it (beyond the cap, or while the credit is
/// another counter's).
[[nodiscard]] void* take(std::uint64_t owner, int device, std::size_t bytes, counter& count) noexcept;

/// Blocks of `owner`'s `device` from the calling thread's stash, none of
/// `size` bytes, taken out into `out` until they add up to `bytes`; returns
/// how many, and takes none when those blocks (at most `capacity`) add up to
/// less. The caller takes their bytes off its counter.
[[nodiscard]] std::size_t take_for_room(std::uint64_t owner, int device, std::size_t size, std::uint64_t bytes,
                                        entry* out, std::size_t capacity) noexcept;

/// Every stash's blocks of `owner`'s `device`, each given to `out`, which
/// returns false to leave it where it is (no room to take it), and every
/// stash's credit for `count`, dropped: returns the credit's bytes, which the
/// caller takes off `count`. A stash whose lock stays held (copied held into
/// a forked child) is left alone, unless `wait`: for a cache that goes, whose
/// counter must be named by no stash afterwards.
[[nodiscard]] std::uint64_t take_all(std::uint64_t owner, int device, bool (*out)(entry const&, void* context),
                                     void* context, counter const& count, bool wait = false) noexcept;

/// The credit for `count` in every stash (a snapshot: threads may be
/// spending and making it meanwhile).
[[nodiscard]] std::uint64_t credit_for(counter const& count) noexcept;

}  // namespace asyncshim::shim::thread_stashes
