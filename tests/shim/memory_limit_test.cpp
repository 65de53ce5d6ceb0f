// ASYNCSHIM_MEMORY_LIMIT (docs/memory-limit.md): the pool's reservation plus
// the blocks passed to the native allocator stay within each device's limit;
// beyond it an allocation fails as a native out-of-memory does, and memory
// info reports the limit as the total and no more free than it leaves.
// libasyncshim.so preloaded into a program of the CUDA test double; each
// suite's environment is stated in tests/shim/CMakeLists.txt (sharing_case).
#include "cuda_double.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

namespace {

using namespace shim_test;

struct memory_info {
  std::size_t free = 0;
  std::size_t total = 0;
};

// What both APIs say; they must say the same.
memory_info info()
{
  memory_info runtime;
  EXPECT_EQ(cudaMemGetInfo(&runtime.free, &runtime.total), cudaSuccess);
  memory_info driver;
  EXPECT_EQ(cuMemGetInfo_v2(&driver.free, &driver.total), CUDA_SUCCESS);
  EXPECT_EQ(driver.free, runtime.free);
  EXPECT_EQ(driver.total, runtime.total);
  return runtime;
}

// ---- ShimMemoryLimit: ASYNCSHIM_MEMORY_LIMIT=64MiB on a device of 1 GiB

using ShimMemoryLimit = ShimTest;

TEST_F(ShimMemoryLimit, RuntimeAllocationsStopAtTheLimitAsNativeOutOfMemory)
{
  void* first = nullptr;
  ASSERT_EQ(cudaMalloc(&first, 40 * MiB), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(first), pool);
  void* second = reinterpret_cast<void*>(0xdead00);
  EXPECT_EQ(cudaMalloc(&second, 40 * MiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(second, nullptr);                                // as a failed native cudaMalloc leaves it
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);  // and the last error
  ASSERT_EQ(cudaMalloc(&second, 20 * MiB), cudaSuccess);     // what is left fits
  EXPECT_EQ(cudaFree(first), cudaSuccess);
  EXPECT_EQ(cudaFree(second), cudaSuccess);
  // Freed memory (cached, queued or idle in the pool) serves a larger block.
  ASSERT_EQ(cudaMalloc(&first, 60 * MiB), cudaSuccess);
  EXPECT_EQ(cudaFree(first), cudaSuccess);
  std::string const text = log_text();
  EXPECT_NE(text.find("cudaMalloc(41943040 bytes = 40.0 MiB) on device 0: out of memory inside the limit of 64.0 MiB "
                      "(ASYNCSHIM_MEMORY_LIMIT)"),
            std::string::npos)
    << text;
}

TEST_F(ShimMemoryLimit, DriverAllocationsStopAtTheLimit)
{
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // a context
  CUdeviceptr first = 0;
  ASSERT_EQ(cuMemAlloc_v2(&first, 40 * MiB), CUDA_SUCCESS);
  CUdeviceptr second = 0;
  EXPECT_EQ(cuMemAlloc_v2(&second, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemFree_v2(first), CUDA_SUCCESS);
}

TEST_F(ShimMemoryLimit, MemoryInfoReportsTheLimitAndWhatItLeaves)
{
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  memory_info const before = info();
  EXPECT_EQ(before.total, 64 * MiB);
  EXPECT_EQ(before.free, 64 * MiB);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 16 * MiB), cudaSuccess);
  memory_info const during = info();
  EXPECT_EQ(during.total, 64 * MiB);
  EXPECT_EQ(during.free, 48 * MiB);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(info().free, 64 * MiB);  // the pool's unused memory is the program's again
}

// ---- ShimMemoryLimitPerDevice: 0:32MiB,1:25% on two devices of 256 MiB; device 2 unlimited

using ShimMemoryLimitPerDevice = ShimTest;

TEST_F(ShimMemoryLimitPerDevice, EachDeviceHasItsOwnLimit)
{
  std::size_t const limits[] = {32 * MiB, 64 * MiB, 256 * MiB};
  for (int device = 0; device < 3; ++device) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(info().total, limits[device]) << "device " << device;
    void* inside = nullptr;
    ASSERT_EQ(cudaMalloc(&inside, limits[device] - 2 * MiB), cudaSuccess) << "device " << device;
    void* beyond = nullptr;
    EXPECT_EQ(cudaMalloc(&beyond, 4 * MiB), cudaErrorMemoryAllocation) << "device " << device;
    (void)cudaGetLastError();
    EXPECT_EQ(cudaFree(inside), cudaSuccess);
  }
}

// ---- ShimMemoryLimitNative: no pools (the device has none), observe mode: the
// native allocator serves, and the limit counts its blocks

using ShimMemoryLimitNative = ShimTest;

TEST_F(ShimMemoryLimitNative, NativeBlocksCountUntilFreed)
{
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* first = nullptr;
  ASSERT_EQ(cudaMalloc(&first, 40 * MiB), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(first), native);
  EXPECT_EQ(info().total, 64 * MiB);
  EXPECT_EQ(info().free, 24 * MiB);
  void* second = reinterpret_cast<void*>(0xdead00);
  EXPECT_EQ(cudaMalloc(&second, 40 * MiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(second, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaFree(first), cudaSuccess);
  EXPECT_EQ(info().free, 64 * MiB);
  ASSERT_EQ(cudaMalloc(&second, 40 * MiB), cudaSuccess);
  EXPECT_EQ(cudaFree(second), cudaSuccess);
}

TEST_F(ShimMemoryLimitNative, ADeviceResetTakesTheNativeBlocksWithIt)
{
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* lost = nullptr;
  ASSERT_EQ(cudaMalloc(&lost, 40 * MiB), cudaSuccess);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);  // frees it, with no cudaFree
  void* next = nullptr;
  ASSERT_EQ(cudaMalloc(&next, 40 * MiB), cudaSuccess);
  EXPECT_EQ(info().free, 24 * MiB);
  EXPECT_EQ(cudaFree(next), cudaSuccess);
}

// ---- ShimOutOfMemoryRecovery: 64MiB, frees queued and fenced, no reuse cache,
// an initial pool of 32 MiB

using ShimOutOfMemoryRecovery = ShimTest;

TEST_F(ShimOutOfMemoryRecovery, QueuedFreesComeBackBeforeAnOutOfMemory)
{
  void* first = nullptr;
  ASSERT_EQ(cudaMalloc(&first, 40 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(first), cudaSuccess);  // queued: the pool still counts it in use
  void* second = nullptr;
  ASSERT_EQ(cudaMalloc(&second, 40 * MiB), cudaSuccess);  // after the queue was issued and waited for
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);             // no trace of the first attempt
  EXPECT_EQ(cudaFree(second), cudaSuccess);
}

TEST_F(ShimOutOfMemoryRecovery, AFailedRecoveryLeavesThePoolTrimmedToWhatIsInUse)
{
  void* kept = nullptr;
  ASSERT_EQ(cudaMalloc(&kept, 8 * MiB), cudaSuccess);
  ASSERT_GE(pool_attribute(kept, cudaMemPoolAttrReservedMemCurrent), 32 * MiB);  // the initial pool
  void* beyond = nullptr;
  EXPECT_EQ(cudaMalloc(&beyond, 100 * MiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  // Its unused memory went back, so that a request could be mapped anew.
  EXPECT_EQ(pool_attribute(kept, cudaMemPoolAttrReservedMemCurrent), 8 * MiB);
  EXPECT_EQ(cudaFree(kept), cudaSuccess);
}

TEST_F(ShimOutOfMemoryRecovery, TheWarningSaysWhatTheRecoveryGaveBack)
{
  void* queued = nullptr;
  ASSERT_EQ(cudaMalloc(&queued, 40 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(queued), cudaSuccess);  // queued, not yet issued
  void* beyond = nullptr;
  EXPECT_EQ(cudaMalloc(&beyond, 100 * MiB), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  std::string const text = log_text();
  EXPECT_NE(text.find("cudaMalloc(104857600 bytes = 100.0 MiB) on device 0: out of memory inside the limit of 64.0 MiB "
                      "(ASYNCSHIM_MEMORY_LIMIT); the pool has "),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("; before retrying, the shim gave back 0 B kept for reuse and issued 40.0 MiB of queued frees\n"),
            std::string::npos)
    << text;
}

// ---- ShimOutOfMemoryPending: 64MiB, the virtual GPU running work only when
// a synchronization waits for it, a pool whose kept blocks serve only their
// own size until trimmed, no reuse cache

using ShimOutOfMemoryPending = ShimTest;

// Launches the double's kernel that touches [p, p + bytes) on `stream`.
void touch(void* p, std::size_t bytes, cudaStream_t stream)
{
  unsigned long long n = 1;
  auto pointer = reinterpret_cast<CUdeviceptr>(p);
  void* params[] = {&n, &pointer, &bytes};
  ASSERT_EQ(cuLaunchKernel(static_cast<CUfunction>(cuda_double_touch_kernel()), 1, 1, 1, 1, 1, 1, 0,
                           reinterpret_cast<CUstream>(stream), params, nullptr),
            CUDA_SUCCESS);
}

TEST_F(ShimOutOfMemoryPending, FreeMemoryInPiecesTooSmallServesALargerBlockAfterTheRecovery)
{
  void* pieces[8] = {};
  for (void*& piece : pieces) {
    ASSERT_EQ(cudaMalloc(&piece, 6 * MiB), cudaSuccess);
  }
  for (void* piece : pieces) {
    ASSERT_EQ(cudaFree(piece), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the frees have run: 48 MiB free, in 6 MiB pieces
  cuda_double_reset_counters();
  void* larger = nullptr;
  ASSERT_EQ(cudaMalloc(&larger, 40 * MiB), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The pool refused it first: the pieces stood in the way until the trim.
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 1u);
  EXPECT_EQ(cudaFree(larger), cudaSuccess);
}

TEST_F(ShimOutOfMemoryPending, ABlockFreedBehindWorkOnABusyStreamServesTheNextAfterTheRecovery)
{
  cudaStream_t busy = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking), cudaSuccess);
  void* first = nullptr;
  ASSERT_EQ(cudaMalloc(&first, 40 * MiB), cudaSuccess);
  cuda_double_sim_handout(first, 40 * MiB);
  touch(first, 40 * MiB, busy);  // pending: nothing waits for the stream
  ASSERT_EQ(cudaFree(first), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(busy), cudaErrorNotReady);
  (void)cudaGetLastError();
  cuda_double_reset_counters();
  void* second = nullptr;
  ASSERT_EQ(cudaMalloc(&second, 40 * MiB), cudaSuccess);
  cuda_double_sim_handout(second, 40 * MiB);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 1u);  // the first attempt, before the recovery
  EXPECT_EQ(cudaStreamQuery(busy), cudaSuccess);           // the recovery waited for the work before the free
  touch(second, 40 * MiB, busy);
  ASSERT_EQ(cudaStreamSynchronize(busy), cudaSuccess);
  EXPECT_EQ(cuda_double_sim_get_summary().uses_after_reissue, 0u);
  EXPECT_EQ(cudaFree(second), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(busy), cudaSuccess);
}

// ---- ShimOutOfMemoryStacks: 64MiB, ASYNCSHIM_LEAK_STACK_DEPTH=3

using ShimOutOfMemoryStacks = ShimTest;

TEST_F(ShimOutOfMemoryStacks, TheWarningNamesTheLargestBlocksAndWhereTheyCameFrom)
{
  void* blocks[3] = {};
  std::size_t const sizes[] = {8 * MiB, 24 * MiB, 16 * MiB};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(cudaMalloc(&blocks[i], sizes[i]), cudaSuccess);
  }
  void* beyond = nullptr;
  EXPECT_EQ(cudaMalloc(&beyond, 40 * MiB), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  std::string const text = log_text();
  std::size_t const heading =
    text.find("  the largest blocks the program holds on device 0, with where each was allocated:\n");
  ASSERT_NE(heading, std::string::npos) << text;
  // Largest first, each with its frames (the test program's, named by object and offset).
  std::size_t const first = text.find("    24.0 MiB at 0x", heading);
  std::size_t const second = text.find("    16.0 MiB at 0x", heading);
  std::size_t const third = text.find("    8.0 MiB at 0x", heading);
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_LT(first, second) << text;
  EXPECT_LT(second, third) << text;
  EXPECT_NE(text.find(" by cudaMalloc: ", first), std::string::npos) << text;
  EXPECT_NE(text.find("sharing_test", first), std::string::npos) << text;
  for (void* b : blocks) {
    EXPECT_EQ(cudaFree(b), cudaSuccess);
  }
}

}  // namespace
