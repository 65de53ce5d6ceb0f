// The sizes the program allocates again and again: the only ones whose freed
// blocks the reuse cache keeps (core/deferred_frees.cpp). A block of a size
// allocated once so far (a one-off buffer, or each of a stream of random
// sizes) would hold cache room, and pool memory between the cache's blocks,
// for an allocation that never comes; it goes to the pool at its free
// instead. A size counts as recurring once two allocations of it have missed
// the cache. The table is a guess and may forget a size (another size takes
// its slot): that only sends a block to the pool, which is always safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace asyncshim::shim {

class recurring_sizes {
 public:
  /// An allocation of `bytes` that the cache did not serve.
  void missed(std::size_t bytes) noexcept
  {
    std::atomic<std::uint64_t>* const bucket = bucket_of(bytes);
    std::uint64_t const once = entry(bytes, false);
    std::uint64_t const twice = entry(bytes, true);
    std::uint64_t seen[ways];
    for (std::size_t i = 0; i < ways; ++i) {
      seen[i] = bucket[i].load(std::memory_order_relaxed);
      if (seen[i] == twice) { return; }  // written only when it changes: no shared line written per allocation
    }
    for (std::size_t i = 0; i < ways; ++i) {
      if (seen[i] == once) {
        bucket[i].store(twice, std::memory_order_relaxed);
        return;
      }
    }
    // A new size takes a slot of a size seen once, else the slot its hash picks:
    // a stream of one-off sizes does not push out the sizes that recur.
    std::size_t victim = static_cast<std::size_t>(bytes >> 4) % ways;
    for (std::size_t i = 0; i < ways; ++i) {
      if ((seen[i] & 1) == 0) { victim = i; }
    }
    bucket[victim].store(once, std::memory_order_relaxed);
  }

  /// Whether blocks of `bytes` are worth keeping.
  [[nodiscard]] bool recurring(std::size_t bytes) const noexcept
  {
    std::atomic<std::uint64_t> const* const bucket = bucket_of(bytes);
    std::uint64_t const twice = entry(bytes, true);
    for (std::size_t i = 0; i < ways; ++i) {
      if (bucket[i].load(std::memory_order_relaxed) == twice) { return true; }
    }
    return false;
  }

 private:
  static constexpr int bucket_bits = 12;  // 4096 buckets of 2: a training step's distinct sizes, many times over
  static constexpr std::size_t ways = 2;

  // The size, shifted past a bit that says it was seen twice; never 0 (an empty slot).
  static constexpr std::uint64_t entry(std::size_t bytes, bool twice) noexcept
  {
    return (static_cast<std::uint64_t>(bytes) + 1) << 1 | (twice ? 1U : 0U);
  }
  static constexpr std::size_t bucket_index(std::size_t bytes) noexcept
  {
    std::uint64_t const mixed = static_cast<std::uint64_t>(bytes) * 0x9E3779B97F4A7C15ULL;  // Fibonacci hashing
    return static_cast<std::size_t>(mixed >> (64 - bucket_bits)) * ways;
  }
  std::atomic<std::uint64_t>* bucket_of(std::size_t bytes) noexcept { return &table_[bucket_index(bytes)]; }
  std::atomic<std::uint64_t> const* bucket_of(std::size_t bytes) const noexcept { return &table_[bucket_index(bytes)]; }

  std::array<std::atomic<std::uint64_t>, (std::size_t{1} << bucket_bits) * ways> table_{};
};

}  // namespace asyncshim::shim
