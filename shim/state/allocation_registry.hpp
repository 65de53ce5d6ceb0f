// Which pointers the shim handed out: the ownership record that lets cudaFree
// tell pool memory (freed stream-ordered) from everything else (passed to the
// native cudaFree untouched). Sharded so threads freeing different pointers
// rarely meet on a lock; no lock is ever held across a CUDA call.
//
// Every cudaMalloc inserts and every cudaFree takes, so neither may touch the
// host heap in steady state: each shard is an open-addressing table whose
// slot array is allocated at the shard's first insert and only ever grows
// (doubling). A program that frees as much as it allocates stops allocating
// host memory here once its tables are big enough for its peak.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "support/spin_lock.hpp"

namespace asyncshim::shim {

struct allocation_record {
  std::size_t bytes = 0;
  int device = 0;
  /// The program has freed the block and the shim has not yet handed it to
  /// the pool (state/deferred_frees.hpp): no longer the program's, still the shim's.
  bool freed = false;
  /// Its number among the blocks handed out (stream_tracker::block_handed_out);
  /// 0 where unknown, which makes a free look at every stream's work.
  std::uint64_t handed_out = 0;
};

/// What claim_for_free found.
enum class free_claim { not_found, claimed, already_freed };

class allocation_registry {
 public:
  /// Throws std::bad_alloc when the record cannot be stored (the registry is then as it was). A record for `ptr`
  /// already there is replaced. A null pointer is never stored (no allocation is ever null): inserting it does nothing.
  void insert(void const* ptr, allocation_record record);
  /// Removes and returns the record of `ptr`; nothing when the shim did not allocate it.
  [[nodiscard]] std::optional<allocation_record> take(void const* ptr) noexcept;
  /// A free of `ptr`: marks its record freed and copies it to `record`. The
  /// record stays until take_freed() (or unclaim(), should the free fail),
  /// so that a second free of it is known to be a double free however long
  /// the block waits before it goes back to the pool.
  [[nodiscard]] free_claim claim_for_free(void const* ptr, allocation_record& record) noexcept;
  /// The free of a claimed block failed: the program has it again.
  void unclaim(void const* ptr) noexcept;
  /// A claimed block is about to be handed to the pool: removes and returns
  /// its record; nothing when `ptr` is not claimed (a reset dropped it, or it
  /// went back already). Taken before the pool has the block, never after:
  /// the pool may hand the address out again at once, and the new
  /// allocation's record (or its next free's claim) must stay. Should handing
  /// it over fail, put_back() restores the record.
  [[nodiscard]] std::optional<allocation_record> take_freed(void const* ptr) noexcept;
  /// Whether `ptr` is claimed (freed by the program, still the shim's): its
  /// record stays so while the reuse cache keeps the block.
  [[nodiscard]] bool claimed(void const* ptr) noexcept;
  /// insert() for a record take_freed() returned; false when there is no host
  /// memory for it.
  [[nodiscard]] bool put_back(void const* ptr, allocation_record record) noexcept;
  /// Whether `ptr` is the start of a block the shim handed out and the program
  /// has not freed.
  [[nodiscard]] bool contains(void const* ptr) noexcept;
  /// The record of such a block.
  [[nodiscard]] std::optional<allocation_record> find(void const* ptr) noexcept;
  /// Removes and returns every record of `device`, freed ones too (a device reset).
  [[nodiscard]] std::vector<std::pair<void*, allocation_record>> take_device(int device) noexcept;
  /// How many allocations and frees of the program the registry has seen: a
  /// count that changes whenever the program allocates or frees (read without
  /// taking any lock, for the idle release).
  [[nodiscard]] std::uint64_t activity() const noexcept;

  /// Where a record lives: its shard, and the slot its probe starts from in a
  /// table of mask + 1 slots (a table starts with initial_capacity). Public
  /// for the tests that build collisions.
  /// @{
  static constexpr std::size_t shard_count = 64;
  static constexpr std::size_t initial_capacity = 256;
  [[nodiscard]] static std::size_t shard_of(std::uintptr_t address) noexcept;
  [[nodiscard]] static std::size_t home_slot(std::uintptr_t address, std::size_t mask) noexcept;
  /// @}

 private:
  /// One shard's records: linear probing over a power-of-two array of slots,
  /// keyed by address, address 0 marking an empty slot. The load is kept at
  /// most one half, so there is always an empty slot to end a probe. Removal
  /// shifts the rest of the probe chain back (no tombstones), so chains stay
  /// as short as if the removed record had never been there and the table
  /// never needs rebuilding; it is never shrunk either.
  class record_table {
   public:
    [[nodiscard]] allocation_record* find(std::uintptr_t address) noexcept;
    /// Throws std::bad_alloc, leaving the table as it was, when it must grow and cannot.
    void insert_or_assign(std::uintptr_t address, allocation_record record);
    [[nodiscard]] std::optional<allocation_record> take(std::uintptr_t address) noexcept;
    /// Removes every record of `device`, appending it to `taken` while there is host memory for that.
    void take_device(int device, std::vector<std::pair<void*, allocation_record>>& taken) noexcept;

   private:
    struct slot {
      std::uintptr_t address = 0;  ///< 0: empty
      allocation_record record;
    };
    [[nodiscard]] std::size_t probe(std::uintptr_t address) const noexcept;
    void erase_at(std::size_t index) noexcept;
    void grow();

    std::unique_ptr<slot[]> slots_;  ///< null until the first insert
    std::uint32_t capacity_ = 0;     ///< a power of two, or 0
    std::uint32_t size_ = 0;         ///< occupied slots
  };

  /// A cache line each, so that threads working on different shards do not
  /// share one, and an operation touches one line only.
  struct alignas(64) shard {
    spin_lock lock;  ///< held for a probe and an update, nothing else
    record_table records;
    /// Inserts and claims, written only under the lock (so a plain load and
    /// store, never a locked increment), read by activity() without it.
    std::atomic<std::uint64_t> changes{0};
    void count_change() noexcept
    {
      changes.store(changes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  };
  static_assert(sizeof(shard) == 64, "a shard's lock, table and activity count fill one cache line");
  /// Defined in the .cpp, the only place that calls it.
  template <class F>
  auto with_shard(void const* ptr, F&& f, bool program_operation = false);

  std::array<shard, shard_count> shards_;
};

}  // namespace asyncshim::shim
