// The sizes the program allocates again and again: the only ones whose freed
// blocks the reuse cache keeps (core/deferred_frees.cpp). A block of a size
// allocated once so far (a one-off buffer, or each of a stream of random
// sizes) would hold cache room, and pool memory between the cache's blocks,
// for an allocation that never comes; it goes to the pool at its free
// instead. A size counts as recurring once two allocations of it have missed
// the cache, on any device. The table is a guess and may forget a size
// (other sizes take its slot): that only sends a block to the pool, which is
// always safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace asyncshim::shim {

class recurring_sizes {
 public:
  static constexpr int bucket_bits = 12;  ///< 4096 buckets of 4 slots: a training step's sizes, many times over
  static constexpr std::size_t ways = 4;

  /// An allocation of `bytes` that the cache did not serve.
  void missed(std::size_t bytes) noexcept
  {
    std::atomic<std::uint64_t>* const slots = &table_[bucket(bytes) * ways];
    std::uint64_t const once = entry(bytes, false);
    std::uint64_t const twice = entry(bytes, true);
    std::array<std::uint64_t, ways> seen{};
    for (std::size_t i = 0; i < ways; ++i) {
      seen[i] = slots[i].load(std::memory_order_relaxed);
      if (seen[i] == twice) { return; }  // written only when it changes: no shared line written per allocation
    }
    for (std::size_t i = 0; i < ways; ++i) {
      if (seen[i] == once) {
        slots[i].store(twice, std::memory_order_relaxed);
        return;
      }
    }
    slots[victim(bytes, seen)].store(once, std::memory_order_relaxed);
  }

  /// Whether blocks of `bytes` are worth keeping.
  [[nodiscard]] bool recurring(std::size_t bytes) const noexcept
  {
    std::atomic<std::uint64_t> const* const slots = &table_[bucket(bytes) * ways];
    std::uint64_t const twice = entry(bytes, true);
    for (std::size_t i = 0; i < ways; ++i) {
      if (slots[i].load(std::memory_order_relaxed) == twice) { return true; }
    }
    return false;
  }

  /// The bucket whose slots may hold `bytes` (Fibonacci hashing).
  [[nodiscard]] static constexpr std::size_t bucket(std::size_t bytes) noexcept
  {
    return static_cast<std::size_t>(mixed(bytes) >> (64 - bucket_bits));
  }

 private:
  static constexpr std::uint64_t mixed(std::size_t bytes) noexcept
  {
    return static_cast<std::uint64_t>(bytes) * 0x9E3779B97F4A7C15ULL;
  }
  // The size, shifted past a bit that says it was seen twice; never 0 (an empty slot).
  static constexpr std::uint64_t entry(std::size_t bytes, bool twice) noexcept
  {
    return (static_cast<std::uint64_t>(bytes) + 1) << 1 | (twice ? 1U : 0U);
  }
  // The slot a new size takes: an empty one, else one of a size seen once (a
  // stream of one-off sizes pushes out its own kind first), else any; among
  // several, the one the size's hash picks.
  static std::size_t victim(std::size_t bytes, std::array<std::uint64_t, ways> const& seen) noexcept
  {
    std::size_t const start = static_cast<std::size_t>(mixed(bytes) >> 8) % ways;
    for (auto const wanted : {0, 1}) {  // 0: empty; 1: seen once
      for (std::size_t k = 0; k < ways; ++k) {
        std::size_t const i = (start + k) % ways;
        if (wanted == 0 ? seen[i] == 0 : (seen[i] & 1) == 0) { return i; }
      }
    }
    return start;
  }

  std::array<std::atomic<std::uint64_t>, (std::size_t{1} << bucket_bits) * ways> table_{};
};

}  // namespace asyncshim::shim
