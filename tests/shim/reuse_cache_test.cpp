// The reuse cache on its own (state/deferred_frees.hpp): batches in flight until
// completed, idle blocks by exact size, the limit, taking everything, and
// batches named by serial number rather than by their (reused) event. It
// needs no CUDA: events are only handles here.
#include "state/deferred_frees.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
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

}  // namespace
