// The reuse cache on its own (state/deferred_frees.hpp): batches in flight until
// completed, idle blocks by exact size, the limit, taking everything, and
// batches named by serial number rather than by their (reused) event. It
// needs no CUDA: events are only handles here.
#include "state/deferred_frees.hpp"
#include "state/thread_stashes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace {

using asyncshim::shim::reuse_cache;
using block = reuse_cache::block;

void* address(std::uintptr_t a) { return reinterpret_cast<void*>(a); }
CUevent event(std::uintptr_t a) { return reinterpret_cast<CUevent>(a); }

constexpr std::uint64_t no_limit = std::uint64_t{1} << 40;

TEST(ReuseCache, ABatchIsReusableOnlyOnceCompletedAndOnlyForItsSizes)
{
  auto cache = std::make_unique<reuse_cache>();
  block const blocks[] = {{address(0x1000), 256}, {address(0x2000), 4096}};
  ASSERT_TRUE(cache->add_in_flight(0, event(1), blocks, 2));
  EXPECT_EQ(cache->held_bytes(0), 256U + 4096U);
  EXPECT_EQ(cache->take(0, 256), nullptr);  // in flight
  auto const oldest = cache->oldest_in_flight(0);
  EXPECT_EQ(oldest.done, event(1));
  std::vector<block> for_the_pool;
  for_the_pool.reserve(64);
  ASSERT_TRUE(cache->completed(0, oldest.serial, no_limit, for_the_pool));
  EXPECT_TRUE(for_the_pool.empty());
  EXPECT_EQ(cache->oldest_in_flight(0).done, nullptr);
  EXPECT_EQ(cache->take(0, 512), nullptr);  // no block of that size
  EXPECT_EQ(cache->take(1, 256), nullptr);  // nor on another device
  EXPECT_EQ(cache->take(0, 256), address(0x1000));
  EXPECT_EQ(cache->take(0, 256), nullptr);  // handed out once
  EXPECT_EQ(cache->held_bytes(0), 4096U);
  EXPECT_EQ(cache->take(0, 4096), address(0x2000));
  EXPECT_EQ(cache->held_bytes(0), 0U);
}

// An event is recorded again for a later batch once its own batch has
// completed: a thread that asked about the first batch must not move the
// second one, recorded on the same event but not yet completed.
TEST(ReuseCache, ASerialNamesABatchNotItsEvent)
{
  auto cache = std::make_unique<reuse_cache>();
  block const first[] = {{address(0x1000), 256}};
  block const second[] = {{address(0x2000), 256}};
  std::vector<block> for_the_pool;
  for_the_pool.reserve(64);
  ASSERT_TRUE(cache->add_in_flight(0, event(7), first, 1));
  auto const seen = cache->oldest_in_flight(0);                           // one thread looks at the first batch
  ASSERT_TRUE(cache->completed(0, seen.serial, no_limit, for_the_pool));  // another moves it
  ASSERT_TRUE(cache->keep_spare_event(0, event(7)));
  ASSERT_EQ(cache->spare_event(0), event(7));
  ASSERT_TRUE(cache->add_in_flight(0, event(7), second, 1));               // the same event, a new batch
  EXPECT_FALSE(cache->completed(0, seen.serial, no_limit, for_the_pool));  // the first looker is too late
  EXPECT_EQ(cache->take(0, 256), address(0x1000));
  EXPECT_EQ(cache->take(0, 256), nullptr);  // the second batch is still in flight
  auto const now = cache->oldest_in_flight(0);
  EXPECT_EQ(now.done, event(7));
  EXPECT_NE(now.serial, seen.serial);
}

TEST(ReuseCache, BlocksBeyondTheLimitAreForThePool)
{
  auto cache = std::make_unique<reuse_cache>();
  block const blocks[] = {{address(0x1000), 600}, {address(0x2000), 600}, {address(0x3000), 300}};
  ASSERT_TRUE(cache->add_in_flight(2, event(1), blocks, 3));
  std::vector<block> for_the_pool;
  for_the_pool.reserve(64);
  ASSERT_TRUE(cache->completed(2, cache->oldest_in_flight(2).serial, 1000, for_the_pool));
  ASSERT_EQ(for_the_pool.size(), 1U);
  EXPECT_EQ(for_the_pool[0].ptr, address(0x2000));
  EXPECT_EQ(cache->held_bytes(2), 900U);
}

TEST(ReuseCache, TakingEverythingEmptiesTheCacheAndKeepsOrHandsOverTheEvents)
{
  auto cache = std::make_unique<reuse_cache>();
  block const idle[] = {{address(0x1000), 256}};
  block const in_flight[] = {{address(0x2000), 512}};
  std::vector<block> for_the_pool;
  for_the_pool.reserve(64);
  ASSERT_TRUE(cache->add_in_flight(0, event(1), idle, 1));
  ASSERT_TRUE(cache->completed(0, cache->oldest_in_flight(0).serial, no_limit, for_the_pool));
  ASSERT_TRUE(cache->keep_spare_event(0, event(1)));
  ASSERT_TRUE(cache->add_in_flight(0, event(2), in_flight, 1));
  std::vector<block> blocks;
  cache->take_all(0, blocks, nullptr);
  EXPECT_EQ(blocks.size(), 2U);
  EXPECT_EQ(cache->held_bytes(0), 0U);
  EXPECT_EQ(cache->oldest_in_flight(0).done, nullptr);
  // Both events stay, as spares.
  CUevent const a = cache->spare_event(0);
  CUevent const b = cache->spare_event(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(cache->spare_event(0), nullptr);
  // At a reset they are handed over with the blocks.
  ASSERT_TRUE(cache->keep_spare_event(0, a));
  ASSERT_TRUE(cache->add_in_flight(0, b, in_flight, 1));
  blocks.clear();
  std::vector<CUevent> events;
  cache->take_all(0, blocks, &events);
  EXPECT_EQ(blocks.size(), 1U);
  EXPECT_EQ(events.size(), 2U);
  EXPECT_EQ(cache->spare_event(0), nullptr);
}

TEST(ReuseCache, AResetForgetsEverythingItCouldNotHandOver)
{
  auto cache = std::make_unique<reuse_cache>();
  block const blocks[] = {{address(0x1000), 256}};
  ASSERT_TRUE(cache->add_in_flight(3, event(1), blocks, 1));
  ASSERT_TRUE(cache->keep_spare_event(3, event(2)));
  cache->forget(3);
  EXPECT_EQ(cache->held_bytes(3), 0U);
  EXPECT_EQ(cache->oldest_in_flight(3).done, nullptr);
  EXPECT_EQ(cache->spare_event(3), nullptr);
  EXPECT_EQ(cache->take(3, 256), nullptr);
}

// Kept in legacy order: in the freeing thread's stash first, which only that
// thread's allocations take from; a flush and a reset empty every stash.
TEST(ReuseCache, AThreadsStashServesItsOwnAllocationsAndFlushesReachIt)
{
  auto cache = std::make_unique<reuse_cache>();
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x1000), 256, true}, no_limit));
  EXPECT_EQ(cache->held_bytes(0), 256U);
  void* other_thread_got = address(1);
  std::thread([&] { other_thread_got = cache->take(0, 256); }).join();
  EXPECT_EQ(other_thread_got, nullptr);     // not in that thread's stash, nor in the shared lists
  EXPECT_EQ(cache->take(1, 256), nullptr);  // nor for another device
  EXPECT_EQ(cache->take(0, 256), address(0x1000));
  EXPECT_EQ(cache->held_bytes(0), 0U);

  // Another thread's stash, left behind when it ended: a flush finds it.
  std::thread([&] { ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x2000), 512, true}, no_limit)); }).join();
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x3000), 512, true}, no_limit));
  EXPECT_EQ(cache->held_bytes(0), 1024U);
  std::vector<block> blocks;
  cache->take_all(0, blocks, nullptr);
  ASSERT_EQ(blocks.size(), 2U);
  std::sort(blocks.begin(), blocks.end(), [](block const& a, block const& b) { return a.ptr < b.ptr; });
  EXPECT_EQ(blocks[0].ptr, address(0x2000));
  EXPECT_TRUE(blocks[0].in_legacy_order);  // to the pool on the legacy stream
  EXPECT_EQ(blocks[1].ptr, address(0x3000));
  EXPECT_EQ(cache->held_bytes(0), 0U);
  EXPECT_EQ(cache->take(0, 512), nullptr);

  ASSERT_TRUE(cache->keep_in_legacy_order(2, {address(0x4000), 64, true}, no_limit));
  cache->forget(2);
  EXPECT_EQ(cache->held_bytes(2), 0U);
  EXPECT_EQ(cache->take(2, 64), nullptr);
}

// The limit holds across the stash and the shared lists; a full stash spills
// into the shared lists, which any thread takes from.
TEST(ReuseCache, TheLimitCountsTheStashesAndAFullStashSpills)
{
  auto cache = std::make_unique<reuse_cache>();
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x1000), 600, true}, 1000));
  EXPECT_FALSE(cache->keep_in_legacy_order(0, {address(0x2000), 600, true}, 1000));
  EXPECT_EQ(cache->held_bytes(0), 600U);
  EXPECT_EQ(cache->take(0, 600), address(0x1000));
  for (std::uintptr_t i = 0; i < 9; ++i) {  // one more than a stash holds
    ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x10000 + i * 0x100), 32, true}, no_limit));
  }
  EXPECT_EQ(cache->held_bytes(0), 9U * 32U);
  void* other_thread_got = nullptr;
  std::thread([&] { other_thread_got = cache->take(0, 32); }).join();
  EXPECT_EQ(other_thread_got, address(0x10000 + 8 * 0x100));  // the one that spilled
  EXPECT_EQ(cache->held_bytes(0), 8U * 32U);
}

// A block taken from a stash leaves its bytes counted as the thread's credit,
// which its next kept block spends; the credit holds nothing (held_bytes
// leaves it out) but counts against the limit until a flush drops it.
TEST(ReuseCache, AStashesCreditCountsAgainstTheLimitUntilAFlush)
{
  auto cache = std::make_unique<reuse_cache>();
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x1000), 600, true}, 1000));
  EXPECT_EQ(cache->take(0, 600), address(0x1000));
  EXPECT_EQ(cache->held_bytes(0), 0U);
  bool other_kept = true;
  std::thread([&] { other_kept = cache->keep_in_legacy_order(0, {address(0x2000), 500, true}, 1000); }).join();
  EXPECT_FALSE(other_kept);  // 600 counted as credit + 500 > 1000
  std::thread([&] { other_kept = cache->keep_in_legacy_order(0, {address(0x2000), 400, true}, 1000); }).join();
  EXPECT_TRUE(other_kept);
  EXPECT_EQ(cache->held_bytes(0), 400U);
  // Spent on the next block of this thread, limit or not: it is counted already.
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x3000), 600, true}, 0));
  EXPECT_EQ(cache->held_bytes(0), 1000U);
  EXPECT_EQ(cache->take(0, 600), address(0x3000));

  std::vector<block> blocks;
  cache->take_all(0, blocks, nullptr);
  ASSERT_EQ(blocks.size(), 1U);
  EXPECT_EQ(blocks[0].ptr, address(0x2000));
  EXPECT_EQ(cache->held_bytes(0), 0U);
  // Nothing counted any more: the whole limit is free again.
  std::thread([&] { other_kept = cache->keep_in_legacy_order(0, {address(0x4000), 1000, true}, 1000); }).join();
  EXPECT_TRUE(other_kept);
}

// A thread's credit that is short of a block covers part of it: a block as
// large as the limit still fits beside the thread's credit for smaller ones.
TEST(ReuseCache, AShortCreditCoversPartOfTheNextBlock)
{
  auto cache = std::make_unique<reuse_cache>();
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x1000), 100, true}, 1000));
  EXPECT_EQ(cache->take(0, 100), address(0x1000));  // 100 of credit
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x2000), 1000, true}, 1000));
  EXPECT_EQ(cache->held_bytes(0), 1000U);
  bool other_kept = true;  // the credit went into the block: nothing left over it
  std::thread([&] { other_kept = cache->keep_in_legacy_order(0, {address(0x3000), 1, true}, 1000); }).join();
  EXPECT_FALSE(other_kept);
  EXPECT_EQ(cache->take(0, 1000), address(0x2000));
  std::vector<block> blocks;
  cache->take_all(0, blocks, nullptr);
  std::thread([&] { other_kept = cache->keep_in_legacy_order(0, {address(0x4000), 1000, true}, 1000); }).join();
  EXPECT_TRUE(other_kept);  // nothing counted after a flush
}

// A block that does not fit beside the thread's own stashed blocks can have
// them taken out for the pool; another thread's blocks are never taken.
TEST(ReuseCache, AThreadsOwnStashedBlocksMakeRoomForItsNewestBlock)
{
  auto cache = std::make_unique<reuse_cache>();
  std::array<block, 8> room{};
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x1000), 300, true}, 1000));
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x2000), 300, true}, 1000));
  std::thread([&] { EXPECT_TRUE(cache->keep_in_legacy_order(0, {address(0x3000), 300, true}, 1000)); }).join();
  EXPECT_FALSE(cache->keep_in_legacy_order(0, {address(0x4000), 400, true}, 1000));
  EXPECT_EQ(cache->make_room(0, 1001, 1000, room.data(), room.size()), 0U);  // never fits
  ASSERT_EQ(cache->make_room(0, 400, 1000, room.data(), room.size()), 1U);   // 300 of this thread's is enough
  EXPECT_TRUE(room[0].in_legacy_order);
  EXPECT_TRUE(room[0].ptr == address(0x1000) || room[0].ptr == address(0x2000));
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x4000), 400, true}, 1000));
  EXPECT_EQ(cache->held_bytes(0), 1000U);
  // This thread's 700 cannot make room for 1000 beside the other thread's 300: nothing is taken.
  EXPECT_EQ(cache->make_room(0, 1000, 1000, room.data(), room.size()), 0U);
  EXPECT_EQ(cache->held_bytes(0), 1000U);
  // A block of the size being kept is not taken for it (they would only change places).
  EXPECT_EQ(cache->make_room(0, 300, 1000, room.data(), room.size()), 1U);
  EXPECT_EQ(room[0].ptr, address(0x4000));
  EXPECT_EQ(cache->held_bytes(0), 600U);
  EXPECT_EQ(cache->take(0, 400), nullptr);
  std::vector<block> blocks;
  cache->take_all(0, blocks, nullptr);
  EXPECT_EQ(blocks.size(), 2U);
  EXPECT_EQ(cache->counted_bytes(0), 0U);  // nothing counted that is not held
}

// Room made, blocks kept and taken on two threads while a third flushes:
// every block comes out exactly once, and nothing stays counted.
TEST(ReuseCache, RoomMakingBesideFlushesLosesAndDoublesNothing)
{
  auto cache = std::make_unique<reuse_cache>();
  constexpr std::uint64_t limit = 4096;
  constexpr std::size_t sizes[] = {100, 700, 1500};
  std::vector<void*> out_a;
  std::vector<void*> out_b;
  std::vector<void*> out_flush;
  std::atomic<bool> done{false};
  auto const churn = [&](std::uintptr_t base, std::vector<void*>& out) {
    std::array<block, 8> room{};
    for (std::uintptr_t i = 0; i < 20000; ++i) {
      std::size_t const bytes = sizes[(i / 7) % 3];
      void* const p = address(base + i * 0x100);
      if (!cache->keep_in_legacy_order(0, {p, bytes, true}, limit)) {
        std::size_t const n = cache->make_room(0, bytes, limit, room.data(), room.size());
        for (std::size_t k = 0; k < n; ++k) {
          out.push_back(room[k].ptr);
        }
        if (n == 0 || !cache->keep_in_legacy_order(0, {p, bytes, true}, limit)) { out.push_back(p); }
      }
      if (i % 3 == 0) {
        if (void* t = cache->take(0, bytes)) { out.push_back(t); }
      }
    }
  };
  std::thread flusher([&] {
    std::vector<block> blocks;
    while (!done.load()) {
      blocks.clear();
      cache->take_all(0, blocks, nullptr);
      for (block const& b : blocks) {
        out_flush.push_back(b.ptr);
      }
      std::this_thread::yield();
    }
  });
  std::thread a([&] { churn(0x10000000, out_a); });
  std::thread b([&] { churn(0x90000000, out_b); });
  a.join();
  b.join();
  done = true;
  flusher.join();
  std::vector<block> rest;
  cache->take_all(0, rest, nullptr);
  std::vector<void*> all = out_a;
  all.insert(all.end(), out_b.begin(), out_b.end());
  all.insert(all.end(), out_flush.begin(), out_flush.end());
  for (block const& r : rest) {
    all.push_back(r.ptr);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());  // none came out twice
  EXPECT_EQ(all.size(), 40000U);                                     // none was lost
  EXPECT_EQ(cache->counted_bytes(0), 0U);
}

// A thread's credit is for one device at a time: a hit on another device
// gives the first device's credit back.
TEST(ReuseCache, AStashesCreditMovesToTheDeviceOfItsLatestHit)
{
  auto cache = std::make_unique<reuse_cache>();
  ASSERT_TRUE(cache->keep_in_legacy_order(0, {address(0x1000), 600, true}, 1000));
  ASSERT_TRUE(cache->keep_in_legacy_order(1, {address(0x2000), 600, true}, 1000));
  EXPECT_EQ(cache->take(0, 600), address(0x1000));  // device 0's credit: 600
  EXPECT_EQ(cache->take(1, 600), address(0x2000));  // device 1's now; device 0's given back
  bool other_kept = false;
  std::thread([&] { other_kept = cache->keep_in_legacy_order(0, {address(0x3000), 1000, true}, 1000); }).join();
  EXPECT_TRUE(other_kept);
  std::thread([&] { other_kept = cache->keep_in_legacy_order(1, {address(0x4000), 1000, true}, 1000); }).join();
  EXPECT_FALSE(other_kept);
  // Blocks larger than the cap are never credit.
  auto const big = asyncshim::shim::thread_stashes::credit_cap + 1;
  ASSERT_TRUE(cache->keep_in_legacy_order(2, {address(0x5000), big, true}, no_limit));
  EXPECT_EQ(cache->take(2, big), address(0x5000));
  std::thread([&] { other_kept = cache->keep_in_legacy_order(2, {address(0x6000), big, true}, big); }).join();
  EXPECT_TRUE(other_kept);
}

// Two caches (as in these tests) never hand out each other's blocks.
TEST(ReuseCache, AStashEntryBelongsToItsCache)
{
  auto first = std::make_unique<reuse_cache>();
  auto second = std::make_unique<reuse_cache>();
  ASSERT_TRUE(first->keep_in_legacy_order(0, {address(0x1000), 256, true}, no_limit));
  EXPECT_EQ(second->take(0, 256), nullptr);
  EXPECT_EQ(second->held_bytes(0), 0U);
  std::vector<block> blocks;
  second->take_all(0, blocks, nullptr);
  EXPECT_TRUE(blocks.empty());
  EXPECT_EQ(first->take(0, 256), address(0x1000));
}

}  // namespace
