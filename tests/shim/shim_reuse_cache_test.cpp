// The reuse cache, with libasyncshim.so preloaded into a program linked against
// the CUDA test double. The shim reads its settings once per process, so each
// suite runs in an environment of its own, stated in tests/shim/CMakeLists.txt
// (shim_case) and checked at the start of each test (suite_environment.hpp).
#include "cuda_double.hpp"
#include "shim_free_expectations.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace shim_test;

// ---- ShimInOrderReuseCache: in-order frees (the default) with
// ASYNCSHIM_REUSE_CACHE=16MiB, on a 64 MiB device; each test begins with a
// device reset (an empty cache and pool)

class ShimInOrderReuseCache : public ShimTest {
 protected:
  void SetUp() override
  {
    ShimTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) { return; }
    ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  }
};

TEST_F(ShimInOrderReuseCache, AFreeInOrderIsKeptAndComesBackWithoutACudaCall)
{
  ASSERT_NO_FATAL_FAILURE(make_recurring(1000));
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  auto after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees);  // kept, not freed to the pool
  // Its action on the legacy stream, which orders the blocking streams.
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // still a double free
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  auto const kept = cuda_double_get_counters();
  void* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, 1000), cudaSuccess);
  EXPECT_EQ(again, p);
  after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_allocs, kept.pool_allocs);  // no pool call
  EXPECT_EQ(after.failed_calls, kept.failed_calls);
  ASSERT_EQ(cudaFree(again), cudaSuccess);
}

// A size allocated once goes to the pool at its free: it would hold the
// cache's room for an allocation that may never come.
TEST_F(ShimInOrderReuseCache, OnlySizesAllocatedAgainAreKept)
{
  void* once = nullptr;
  ASSERT_EQ(cudaMalloc(&once, 1234567), cudaSuccess);
  auto before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(once), cudaSuccess);
  auto after = cuda_double_get_counters();
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 1);  // to the pool
  EXPECT_EQ(after.events_recorded, before.events_recorded);  // no barrier: the pool's free is its legacy action
  EXPECT_EQ(cuda_double_pointer_kind(once), unknown);
  void* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, 1234567), cudaSuccess);  // a second miss of that size
  before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(again), cudaSuccess);
  after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees);  // kept
  EXPECT_EQ(cuda_double_pointer_kind(again), pool);
}

TEST_F(ShimInOrderReuseCache, WithAnIdleNonBlockingStreamAKeptBlockHasOneRecordOnTheLegacyStream)
{
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  auto after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees);  // kept
  // The kept block's action on the legacy stream: one record. The stream,
  // given no work since the block was handed out, waits for it only when it
  // next gets work.
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(cuda_double_last_record_stream(), CU_STREAM_LEGACY);
  void* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, 1000), cudaSuccess);
  EXPECT_EQ(again, p);
  ASSERT_NO_FATAL_FAILURE(launch_on(side));
  after = cuda_double_get_counters();
  EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
  EXPECT_EQ(cuda_double_last_wait_stream(), side);
  ASSERT_EQ(cudaFree(again), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

TEST_F(ShimInOrderReuseCache, BlocksBeyondTheLimitGoToThePoolOnTheLegacyStream)
{
  std::vector<void*> blocks(8);
  for (void*& b : blocks) {
    ASSERT_EQ(cudaMalloc(&b, 3 * MiB), cudaSuccess);
  }
  auto const before = cuda_double_get_counters();
  for (void* b : blocks) {
    ASSERT_EQ(cudaFree(b), cudaSuccess);
  }
  auto const after = cuda_double_get_counters();
  // 5 fit within 16 MiB.
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 3);
  EXPECT_EQ(after.pool_frees, before.pool_frees + 3);
  int cached = 0;
  for (void* b : blocks) {
    cached += cuda_double_pointer_kind(b) == pool ? 1 : 0;
  }
  EXPECT_EQ(cached, 5);
}

// A program that moves on to a larger size: its older block goes to the pool
// to make room, and the new size is served from the cache from then on.
TEST_F(ShimInOrderReuseCache, TheNewestSizeTakesTheRoomOfTheThreadsOlderBlocks)
{
  void* room = nullptr;  // the pool reserves room first: a miss that would make it grow flushes the cache
  ASSERT_EQ(cudaMalloc(&room, 40 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(room), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(make_recurring(12 * MiB));
  ASSERT_NO_FATAL_FAILURE(make_recurring(10 * MiB));  // one kept, in the room of the 12 MiB blocks
  void* small = nullptr;
  ASSERT_EQ(cudaMalloc(&small, 10 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(small), cudaSuccess);  // kept: 10 of 16 MiB
  void* large = nullptr;
  ASSERT_EQ(cudaMalloc(&large, 12 * MiB), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(large), cudaSuccess);  // 10 + 12 > 16: the 10 MiB block makes way
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 1);
  EXPECT_EQ(cuda_double_pointer_kind(small), unknown);  // back in the pool
  EXPECT_EQ(cuda_double_pointer_kind(large), pool);     // kept
  EXPECT_EQ(cudaFree(small), cudaErrorInvalidValue);    // freed once already
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  for (int i = 0; i < 3; ++i) {
    void* again = nullptr;
    ASSERT_EQ(cudaMalloc(&again, 12 * MiB), cudaSuccess);
    EXPECT_EQ(again, large);
    ASSERT_EQ(cudaFree(again), cudaSuccess);
  }
  auto const hits = cuda_double_get_counters();
  EXPECT_EQ(hits.pool_allocs, after.pool_allocs);  // no CUDA call for the allocations
  EXPECT_EQ(hits.pool_frees, after.pool_frees);
}

TEST_F(ShimInOrderReuseCache, AnAllocationOnlyTheirMemoryCanServeGetsThemBackOnTheLegacyStream)
{
  std::vector<void*> blocks(5);
  for (void*& b : blocks) {
    ASSERT_EQ(cudaMalloc(&b, 3 * MiB), cudaSuccess);
  }
  for (void* b : blocks) {
    ASSERT_EQ(cudaFree(b), cudaSuccess);  // 15 MiB cached
  }
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  auto const before = cuda_double_get_counters();
  void* filler = nullptr;
  ASSERT_EQ(cudaMalloc(&filler, free - 2 * MiB), cudaSuccess);  // only with the cached memory
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 5);
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream);
  ASSERT_EQ(cudaFree(filler), cudaSuccess);
}

TEST_F(ShimInOrderReuseCache, AMissThatWouldMakeThePoolGrowGetsThemFirst)
{
  void* room = nullptr;  // so that the blocks below come from memory the pool has: none flushes the cache
  ASSERT_EQ(cudaMalloc(&room, 8 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(room), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(make_recurring(MiB));   // two cached
  ASSERT_NO_FATAL_FAILURE(make_recurring(4096));  // two cached
  void* cached = nullptr;
  ASSERT_EQ(cudaMalloc(&cached, MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(cached), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(cached), pool);
  std::uint64_t const reserved = pool_attribute(cached, cudaMemPoolAttrReservedMemCurrent);
  std::uint64_t const used = pool_attribute(cached, cudaMemPoolAttrUsedMemCurrent);
  // A size the pool has free: the cache keeps its block.
  void* fits = nullptr;
  ASSERT_EQ(cudaMalloc(&fits, 4096), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(cached), pool);
  ASSERT_EQ(cudaFree(fits), cudaSuccess);
  // One it does not: the four cached blocks go to the pool (on the legacy stream) first.
  auto const before = cuda_double_get_counters();
  void* grows = nullptr;
  ASSERT_EQ(cudaMalloc(&grows, reserved - used + MiB / 2), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 4);
  EXPECT_EQ(cuda_double_get_counters().free_async_non_blocking_stream, before.free_async_non_blocking_stream);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaFree(grows), cudaSuccess);
}

TEST_F(ShimInOrderReuseCache, AResetFreesEachCachedBlockOnce)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);  // cached
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);  // once, on the legacy stream
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 1);
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

// ---- ShimReuseCache: device ordering's reuse cache (ASYNCSHIM_REUSE_CACHE=16MiB),
// on a 64 MiB device

using ShimReuseCache = ShimTest;

TEST_F(ShimReuseCache, AFencedBlockComesBackForTheSameSizeWithoutACudaCall)
{
  ASSERT_NO_FATAL_FAILURE(make_recurring(1000));
  issue_queued_frees();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // queued
  issue_queued_frees();                 // fenced: into the cache, not to the pool
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // cached: still a double free
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  auto const before = cuda_double_get_counters();
  void* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, 1000), cudaSuccess);
  EXPECT_EQ(again, p);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_allocs, before.pool_allocs);    // no pool call
  EXPECT_EQ(after.failed_calls, before.failed_calls);  // and nothing else failed
  // Another size misses and comes from the pool.
  void* other = nullptr;
  ASSERT_EQ(cudaMalloc(&other, 2000), cudaSuccess);
  EXPECT_NE(other, p);
  EXPECT_EQ(cuda_double_get_counters().pool_allocs, before.pool_allocs + 1);
  // A double free of the reused block is still a double free.
  ASSERT_EQ(cudaFree(again), cudaSuccess);
  EXPECT_EQ(cudaFree(again), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
  issue_queued_frees();
}

TEST_F(ShimReuseCache, AFencedBlockOfASizeAllocatedOnceGoesToThePool)
{
  issue_queued_frees();
  void* once = nullptr;
  ASSERT_EQ(cudaMalloc(&once, 765432), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(once), cudaSuccess);  // queued
  issue_queued_frees();                    // fenced, then to the pool rather than into the cache
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees + 1);
  EXPECT_EQ(cuda_double_pointer_kind(once), unknown);
}

TEST_F(ShimReuseCache, BlocksBeyondTheLimitGoToThePool)
{
  issue_queued_frees();
  std::vector<void*> blocks(8);
  for (void*& b : blocks) {
    ASSERT_EQ(cudaMalloc(&b, 3 * MiB), cudaSuccess);
  }
  auto const before = cuda_double_get_counters();
  for (void* b : blocks) {
    ASSERT_EQ(cudaFree(b), cudaSuccess);
  }
  issue_queued_frees();
  // The next allocation that misses (another size) finds the batch's fence
  // completed: 5 x 3 MiB fit in 16 MiB, the other 3 go to the pool.
  void* other = nullptr;
  ASSERT_EQ(cudaMalloc(&other, 777), cudaSuccess);  // a size no block in the cache has
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + 3);
  int cached = 0;
  for (void* b : blocks) {
    // (The pool may have given `other` the start of a block it got back.)
    cached += b != other && cuda_double_pointer_kind(b) == pool ? 1 : 0;
  }
  EXPECT_EQ(cached, 5);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
}

TEST_F(ShimReuseCache, CachedBlocksCountAsFreeMemory)
{
  // (Small enough to fit beside what the tests before left in the cache.)
  ASSERT_NO_FATAL_FAILURE(make_recurring(512 * KiB));
  issue_queued_frees();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 512 * KiB), cudaSuccess);
  std::size_t free_in_use = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_in_use, &total), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);  // cached
  std::size_t free_cached = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_cached, &total), cudaSuccess);
  EXPECT_GE(free_cached, free_in_use + 512 * KiB);
}

TEST_F(ShimReuseCache, AnAllocationThatWouldFailGetsTheCachedMemory)
{
  issue_queued_frees();
  std::vector<void*> blocks(4);
  for (void*& b : blocks) {
    ASSERT_EQ(cudaMalloc(&b, 4 * MiB), cudaSuccess);
  }
  for (void* b : blocks) {
    ASSERT_EQ(cudaFree(b), cudaSuccess);
  }
  issue_queued_frees();  // 16 MiB cached
  // Everything else the device has, then a size the cache does not hold:
  // only the cached memory can serve it.
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  void* filler = nullptr;
  std::size_t const rest = free - 16 * MiB;
  ASSERT_EQ(cudaMalloc(&filler, rest), cudaSuccess);
  void* big = nullptr;
  ASSERT_EQ(cudaMalloc(&big, 12 * MiB), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the retry left no error behind
  ASSERT_EQ(cudaFree(big), cudaSuccess);
  ASSERT_EQ(cudaFree(filler), cudaSuccess);
  issue_queued_frees();
}

TEST_F(ShimReuseCache, AResetFreesTheCachedBlocks)
{
  issue_queued_frees();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
  void* after = nullptr;  // a new pool, an empty cache
  ASSERT_EQ(cudaMalloc(&after, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(after), cudaSuccess);
}

}  // namespace
