// Where allocations come from (pools, streams, threads, defaults), with
// libasyncshim.so preloaded into a program linked against the CUDA test double.
// The shim reads its settings once per process, so each suite runs in an
// environment of its own, stated in tests/shim/CMakeLists.txt (shim_case) and
// checked at the start of each test (suite_environment.hpp).
#include "cuda_double.hpp"
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

// ---- ShimRedirects: a primed pool with a release threshold, two devices;
// ShimOutOfMemory: an allocation larger than the device

using ShimRedirects = ShimTest;
using ShimOutOfMemory = ShimTest;

TEST_F(ShimRedirects, CudaMallocComesFromThePoolOnTheLegacyStream)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);  // the pool exists (priming counts as a pool free)
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamLegacy);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  // Device ordering (the default): queued, the pool does not have it yet.
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.native_mallocs, before.native_mallocs);
  EXPECT_EQ(after.native_frees, before.native_frees);
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);
  // Then freed on the shim's own non-blocking stream, after a fence on the
  // legacy stream.
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream + 1);
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);
  EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
  EXPECT_EQ(cuda_double_last_wait_stream(), cuda_double_last_free_stream());
}

TEST_F(ShimRedirects, QueuedFreesAreIssuedInBatchesBehindOneFence)
{
  issue_queued_frees();
  constexpr int batch = 64;  // free_queue::batch_frees
  std::vector<void*> blocks(batch);
  for (void*& p : blocks) {
    ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  }
  auto const before = cuda_double_get_counters();
  for (int i = 0; i < batch - 1; ++i) {
    ASSERT_EQ(cudaFree(blocks[i]), cudaSuccess);
  }
  auto after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees);  // all 63 queued
  EXPECT_EQ(after.events_recorded, before.events_recorded);
  EXPECT_EQ(cudaFree(blocks[0]), cudaErrorInvalidValue);  // a double free while queued, as natively
  ASSERT_EQ(cudaFree(blocks[batch - 1]), cudaSuccess);    // the 64th: the batch goes
  after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + batch);
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream + batch);
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);  // one fence: the legacy stream
  EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
  for (void* p : blocks) {
    EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  }
  (void)cudaGetLastError();
}

TEST_F(ShimRedirects, AQueueOfManyBytesIsIssuedAtOnce)
{
  issue_queued_frees();
  void* small = nullptr;
  void* large = nullptr;
  ASSERT_EQ(cudaMalloc(&small, 1000), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&large, 64 * MiB), cudaSuccess);  // free_queue::batch_bytes
  ASSERT_EQ(cudaFree(small), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(small), pool);
  ASSERT_EQ(cudaFree(large), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(small), unknown);
  EXPECT_EQ(cuda_double_pointer_kind(large), unknown);
}

TEST_F(ShimRedirects, PoolHasTheConfiguredSettings)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReleaseThreshold), 1 * GiB);
  EXPECT_GE(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), 64 * MiB);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimRedirects, OnePoolPerDeviceCreatedLazily)
{
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&a, 100), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c, 100), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 100), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_pool(a), cuda_double_pointer_pool(c));
  EXPECT_NE(cuda_double_pointer_pool(a), cuda_double_pointer_pool(b));
  // Freeing device-0 memory while device 1 is current works and leaves device 1 current.
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  int current = -1;
  EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 1);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  EXPECT_EQ(cudaFree(c), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

// Once a device has its pool, an allocation finds the device from the current
// context and never asks the runtime (cudaGetDevice): a thread inside the
// runtime while another thread forks leaves the runtime's lock held in the
// child, and the child then hangs in the runtime's exit handler.
TEST_F(ShimRedirects, AllocationsAskTheRuntimeNothingOnceThePoolExists)
{
  void* warm[2] = {nullptr, nullptr};
  for (int device = 0; device < 2; ++device) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&warm[device], 100), cudaSuccess);  // makes the pool
  }
  auto const before = cuda_double_get_counters();
  void* p[2] = {nullptr, nullptr};
  for (int device = 1; device >= 0; --device) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&p[device], 256), cudaSuccess);
  }
  EXPECT_EQ(cuda_double_get_counters().runtime_device_queries, before.runtime_device_queries);
  EXPECT_EQ(cuda_double_get_counters().pool_allocs, before.pool_allocs + 2);
  // Each in the pool of the device that was current.
  EXPECT_EQ(cuda_double_pointer_pool(p[0]), cuda_double_pointer_pool(warm[0]));
  EXPECT_EQ(cuda_double_pointer_pool(p[1]), cuda_double_pointer_pool(warm[1]));
  for (int device = 0; device < 2; ++device) {
    EXPECT_EQ(cudaFree(p[device]), cudaSuccess);
    EXPECT_EQ(cudaFree(warm[device]), cudaSuccess);
  }
}

TEST_F(ShimRedirects, NativeEdgeCasesBehaveNatively)
{
  void* p = reinterpret_cast<void*>(0x1234);
  EXPECT_EQ(cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  int on_stack = 0;
  EXPECT_EQ(cudaFree(&on_stack), cudaErrorInvalidValue);
}

TEST_F(ShimRedirects, ForeignPointersGoToTheNativeFree)
{
  void* native_ptr = nullptr;
  ASSERT_EQ(native_malloc(&native_ptr, 4096), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(native_ptr), native);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(native_ptr), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().native_frees, before.native_frees + 1);
  EXPECT_EQ(cudaFree(native_ptr), cudaErrorInvalidValue);  // double free, as natively
}

TEST_F(ShimRedirects, DoubleFreeOfPoolMemoryIsInvalidValue)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 512), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);         // while queued
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // left as the last error, as natively
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);          // the first free still holds
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // once back in the pool
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST_F(ShimRedirects, AFreeWithAnotherDeviceCurrentIsFencedAtOnce)
{
  issue_queued_frees();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* q = nullptr;
  ASSERT_EQ(cudaMalloc(&q, 1000), cudaSuccess);  // device 1's pool and context exist
  auto const before = cuda_double_get_counters();
  // Not in the pool's context: the fence must be taken now, where the
  // program worked, so the free does not wait in the queue.
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 1);  // put back
  EXPECT_EQ(cudaFree(q), cudaSuccess);
  issue_queued_frees();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_F(ShimOutOfMemory, OneLogLineWithTheFiguresAndTheProgramContinues)
{
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, PiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const text = log_text();
  EXPECT_NE(text.find("warning: cudaMalloc(1125899906842624 bytes = 1.0 PiB) on device 0: out of memory; the pool has "
                      "0 B reserved, 0 B of it in use; the device has "),
            std::string::npos)
    << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

// One call site of cudaMalloc in the program (not inlined: one return address).
[[gnu::noinline]] cudaError_t allocate_a_pebibyte()
{
  void* p = nullptr;
  cudaError_t const result = cudaMalloc(&p, PiB);
  asm volatile("" ::: "memory");  // no tail call: the return address stays in this function
  return result;
}

// A program that retries in a loop is told once per call site.
TEST_F(ShimOutOfMemory, EachCallSiteIsToldOnce)
{
  auto const lines = [] {
    std::string const text = log_text();
    return std::count(text.begin(), text.end(), '\n');
  };
  auto const before = lines();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(allocate_a_pebibyte(), cudaErrorMemoryAllocation);
  }
  EXPECT_EQ(lines(), before + 1);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, PiB), cudaErrorMemoryAllocation);  // another call site
  EXPECT_EQ(lines(), before + 2);
  (void)cudaGetLastError();
}

TEST_F(ShimRedirects, OnePebibyteIsMemoryAllocationAndTheProgramContinues)
{
  void* p = reinterpret_cast<void*>(0xdead00);
  EXPECT_EQ(cudaMalloc(&p, PiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);                                     // as a failed native cudaMalloc leaves it
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);  // as a native failure leaves it
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1024), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimRedirects, ManyThreadsAllocateAndFreeEachOthersMemory)
{
  constexpr int threads = 16;
  constexpr int rounds = 300;
  std::vector<std::vector<void*>> made(threads);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 256 * (1 + (i + t) % 13)) != cudaSuccess || cuda_double_pointer_kind(p) != pool) {
          ++failures;
          continue;
        }
        std::memset(p, t, 256);  // the double's memory is host memory
        if (i % 2 == 0) {
          if (cudaFree(p) != cudaSuccess) { ++failures; }
        } else {
          made[t].push_back(p);
        }
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  workers.clear();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (void* p : made[(t + 1) % threads]) {
        if (static_cast<unsigned char*>(p)[0] != static_cast<unsigned char>((t + 1) % threads)) { ++failures; }
        if (cudaFree(p) != cudaSuccess) { ++failures; }
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  EXPECT_EQ(failures.load(), 0);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

// ---- ShimPerThreadStream: allocations on the per-thread stream

using ShimPerThreadStream = ShimTest;

TEST_F(ShimPerThreadStream, AllocatesOnThePerThreadStream)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamPerThread);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
}

// ---- ShimDefaults: the shim's defaults

using ShimDefaults = ShimTest;

TEST_F(ShimDefaults, PoolStartsEmptyAndKeepsWhatItGrowsTo)
{
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);  // before the pool exists
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReleaseThreshold), total);
  // Only what the allocation needed: one of the double's 2 MiB steps.
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

}  // namespace
