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

// ---- ShimStreamOrdering: stream ordering on the per-thread stream

using ShimStreamOrdering = ShimTest;

TEST_F(ShimStreamOrdering, FreesOnTheAllocationStreamWithoutFences)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamPerThread);
  // The pool keeps CUDA's default reuse policy.
  EXPECT_EQ(pool_attribute(p, cudaMemPoolReuseFollowEventDependencies), 1U);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolReuseAllowInternalDependencies), 1U);
  cudaStream_t nonblocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(cuda_double_last_free_stream(), cudaStreamPerThread);
  EXPECT_EQ(after.events_recorded, before.events_recorded);
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(after.context_synchronizes, before.context_synchronizes);
  EXPECT_EQ(cudaStreamDestroy(nonblocking), cudaSuccess);
}

// ---- ShimSyncOrdering: sync ordering

using ShimSyncOrdering = ShimTest;

TEST_F(ShimSyncOrdering, FreeSynchronizesTheDeviceFirst)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.context_synchronizes, before.context_synchronizes + 1);
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream + 1);
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
}

// ---- ShimDeviceOrdering: device ordering (the default)

using ShimDeviceOrdering = ShimTest;

TEST_F(ShimDeviceOrdering, PoolHandsOutOnlyMemoryWhoseFreeHasCompleted)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolReuseFollowEventDependencies), 0U);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolReuseAllowInternalDependencies), 0U);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolReuseAllowOpportunistic), 1U);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimDeviceOrdering, FreeIsFencedBehindEveryLiveNonBlockingStream)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaStream_t nonblocking[2] = {};
  cudaStream_t blocking = nullptr;
  for (auto& s : nonblocking) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault), cudaSuccess);

  issue_queued_frees();
  auto before = cuda_double_get_counters();
  std::size_t const ops_before = cuda_double_stream_ops(nullptr, 0);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  auto after = cuda_double_get_counters();
  // The legacy stream (which covers the blocking stream) and both non-blocking
  // ones, each waited for by one stream (the shim's own, where it frees).
  EXPECT_EQ(after.events_recorded, before.events_recorded + 3);
  EXPECT_EQ(after.stream_waits, before.stream_waits + 3);
  recorded_and_waited const fence = split(stream_ops_from(ops_before));
  EXPECT_EQ(fence.recorded_on, (std::vector<cudaStream_t>{cudaStreamLegacy, nonblocking[0], nonblocking[1]}));
  ASSERT_EQ(fence.waiting.size(), 3U);
  EXPECT_EQ(fence.waiting[1], fence.waiting[0]);
  EXPECT_EQ(fence.waiting[2], fence.waiting[0]);
  for (cudaStream_t s : {cudaStreamLegacy, nonblocking[0], nonblocking[1], blocking, cudaStreamPerThread}) {
    EXPECT_NE(fence.waiting[0], s) << "the fence's waits are on the shim's own stream";
  }
  EXPECT_EQ(fence.waited_for, fence.recorded);
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream + 1);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);

  // A destroyed stream is no longer fenced (nor touched).
  ASSERT_EQ(cudaStreamDestroy(nonblocking[0]), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  after = cuda_double_get_counters();
  EXPECT_EQ(after.events_recorded, before.events_recorded + 2);
  EXPECT_EQ(after.failed_calls, before.failed_calls);
  EXPECT_EQ(cudaStreamDestroy(nonblocking[1]), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(ShimDeviceOrdering, StreamsMadeThroughTheDriverAreFollowedToo)
{
  cudaFree(nullptr);  // a current context
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.events_recorded, before.events_recorded + 2);
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
}

TEST_F(ShimDeviceOrdering, ThePendingErrorOfTheProgramSurvivesShimCalls)
{
  issue_queued_frees();
  std::vector<void*> blocks(64);  // free_queue::batch_frees: the last free issues the batch
  for (void*& p : blocks) {
    ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  }
  int on_stack = 0;
  EXPECT_EQ(cudaFree(&on_stack), cudaErrorInvalidValue);  // the program leaves this unchecked
  auto const before = cuda_double_get_counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  for (void* b : blocks) {
    ASSERT_EQ(cudaFree(b), cudaSuccess);
  }
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees + 64);  // issued inside the last cudaFree
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing left behind by the shim's own calls
}

// CUDA 13's cuCtxSynchronize_v2(ctx), as cuGetProcAddress hands it out from
// version 13000 on: the shim's replacement synchronizes the context it is
// given (here from a thread with none current, where the CUDA 2.0 function
// fails) and then issues the queued frees; the old ABI keeps its meaning.
TEST_F(ShimDeviceOrdering, CtxSynchronizeOfCuda13SynchronizesTheContextItIsGiven)
{
  issue_queued_frees();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // queued
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);
  CUcontext context = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&context), CUDA_SUCCESS);
  ASSERT_NE(context, nullptr);
  void* current_abi = nullptr;
  void* first_abi = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(cuGetProcAddress("cuCtxSynchronize", &current_abi, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress("cuCtxSynchronize", &first_abi, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_NE(current_abi, first_abi);
  auto const before = cuda_double_get_counters();
  std::thread([&] {
    EXPECT_EQ(reinterpret_cast<CUresult (*)()>(first_abi)(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(reinterpret_cast<CUresult (*)(CUcontext)>(current_abi)(context), CUDA_SUCCESS);
  }).join();
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.context_synchronizes, before.context_synchronizes + 1);
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);  // the queued free, issued
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  // The exported names too.
  EXPECT_EQ(cuCtxSynchronize_v2(context), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(ShimDeviceOrdering, AStreamDestroyedBetweenTheFreeAndTheIssueIsStillWaitedFor)
{
  issue_queued_frees();
  cudaStream_t nonblocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);                        // queued
  ASSERT_EQ(cuda_double_set_stream_busy(nonblocking, 1), 1);  // its work goes on after it is destroyed
  auto before = cuda_double_get_counters();
  ASSERT_EQ(cudaStreamDestroy(nonblocking), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);  // its last work
  before = cuda_double_get_counters();
  issue_queued_frees();
  auto after = cuda_double_get_counters();
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);  // the legacy stream
  EXPECT_EQ(after.stream_waits, before.stream_waits + 2);        // and the destroyed stream's last work
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  // Once that work is done the stream is forgotten: a fence waits for the legacy stream only.
  ASSERT_EQ(cuda_double_set_stream_busy(nonblocking, 0), 1);
  cudaStream_t another = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&another, cudaStreamNonBlocking), cudaSuccess);  // drops it
  ASSERT_EQ(cudaStreamDestroy(another), cudaSuccess);  // complete at once, dropped at once
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // queued
  before = cuda_double_get_counters();
  issue_queued_frees();
  after = cuda_double_get_counters();
  EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
}

TEST_F(ShimDeviceOrdering, BeginningACaptureRecordsTheWorkBeforeIt)
{
  issue_queued_frees();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
  // Recorded before the capture began: nothing joined it.
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);
  EXPECT_EQ(cuda_double_get_counters().captured_operations, before.captured_operations);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// ---- ShimInOrderFrees: device ordering on one device, in-order frees on
// (the default); ShimInOrderFreesAfterAContext: the same, then a context of
// the program's own; ShimInOrderFreesAfterRdma: then memory set up for GPUDirect RDMA

using ShimInOrderFrees = ShimTest;

// A cudaFree of a new 1000-byte block `p` that must be queued, not made in
// the legacy stream's order (the pool keeps the block until the queue is
// issued); `before`: the counters just before the free.
void free_expecting_queued(void*& p, cuda_double_counters& before)
{
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);  // queued
}

// The same for a free that must go to the pool at once on the legacy
// stream; `before` and `after`: the counters around the free.
void free_expecting_in_order(void*& p, cuda_double_counters& before, cuda_double_counters& after)
{
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  after = cuda_double_get_counters();
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 1);
}
// Work on `stream` through the driver's kernel launch (the shim's export;
// the double runs nothing).
void launch_on(cudaStream_t stream)
{
  ASSERT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(stream), nullptr, nullptr),
            CUDA_SUCCESS);
}
using ShimInOrderFreesAfterAContext = ShimTest;
using ShimInOrderFreesAfterRdma = ShimTest;

TEST_F(ShimInOrderFrees, WithoutANonBlockingStreamAFreeGoesToThePoolAtOnceOnTheLegacyStream)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 1);
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);
  EXPECT_EQ(after.events_recorded, before.events_recorded);  // no fence
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // a double free, as natively
  // A blocking stream orders itself after the legacy stream: frees stay in order.
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 2);
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(ShimInOrderFrees, ACaptureBeginsAfterTheSettlePointAndItsFreesAreQueued)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // in order
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed), cudaSuccess);
  // The settle point, recorded on the legacy stream before the capture began.
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);
  EXPECT_EQ(cuda_double_get_counters().captured_operations, before.captured_operations);
  // During the capture a free is queued, never in order.
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  // A non-blocking stream made meanwhile is ordered after the settle point
  // without touching the legacy stream.
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().captures_invalidated, before.captures_invalidated);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(blocking, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

TEST_F(ShimInOrderFrees, ANonBlockingStreamIsOrderedAfterThemWhenItNextGetsWork)
{
  issue_queued_frees();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // in order: the settle point is due
  auto before = cuda_double_get_counters();
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  // Recorded on the legacy stream before the program has the stream (its
  // wait is left out: the double's work is always complete).
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);

  // The stream has been given no work since the block was handed out: in
  // order, with no event and no wait at the free.
  cuda_double_counters after{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));
  EXPECT_EQ(after.events_recorded, before.events_recorded);
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);

  // Its next work first waits for an event recorded on the legacy stream
  // after that free; once: the work after it needs no wait.
  before = cuda_double_get_counters();
  ASSERT_NO_FATAL_FAILURE(launch_on(side));
  after = cuda_double_get_counters();
  EXPECT_EQ(after.events_recorded, before.events_recorded + 1);
  EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
  EXPECT_EQ(cuda_double_last_record_stream(), CU_STREAM_LEGACY);
  EXPECT_EQ(cuda_double_last_wait_stream(), side);
  EXPECT_LT(cuda_double_last_serial(CUDA_DOUBLE_EVENT_RECORD), cuda_double_last_serial(CUDA_DOUBLE_STREAM_WAIT));
  ASSERT_NO_FATAL_FAILURE(launch_on(side));
  EXPECT_EQ(cuda_double_get_counters().stream_waits, after.stream_waits);

  // Work in progress given to it before the block was handed out: in order
  // all the same (it cannot use the block).
  ASSERT_EQ(cuda_double_set_stream_busy(side, 1), 1);
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));

  // Work in progress given to it after: queued, and fenced behind it.
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(launch_on(side));
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);  // queued
  issue_queued_frees();
  after = cuda_double_get_counters();
  EXPECT_EQ(after.events_recorded, before.events_recorded + 2);  // the fence: legacy and side stream
  EXPECT_EQ(after.free_async_non_blocking_stream, before.free_async_non_blocking_stream + 1);
  ASSERT_EQ(cuda_double_set_stream_busy(side, 0), 1);
  // Done: in order again.
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(launch_on(side));
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 1);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

TEST_F(ShimInOrderFrees, ADestroyedStreamHoldsUpOnlyTheBlocksItsLastWorkMayUse)
{
  issue_queued_frees();
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  void* used = nullptr;
  ASSERT_EQ(cudaMalloc(&used, 1000), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(launch_on(side));
  ASSERT_EQ(cuda_double_set_stream_busy(side, 1), 1);
  ASSERT_EQ(cudaStreamDestroy(side), cudaSuccess);  // its last work still runs
  auto before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(used), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(used), pool);  // queued
  issue_queued_frees();
  // A block handed out after the stream's last work: in order while it runs.
  void* p = nullptr;
  cuda_double_counters after{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  ASSERT_EQ(cuda_double_set_stream_busy(side, 0), 1);
}

TEST_F(ShimInOrderFrees, ManyNonBlockingStreamsWithoutWorkLeaveThemInOrderWithoutAWait)
{
  issue_queued_frees();
  std::vector<cudaStream_t> streams(40);  // as cuDNN makes 32 at a program's first convolution
  for (cudaStream_t& s : streams) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cuda_double_set_stream_busy(s, 1), 1);  // given work before the block: it cannot use it
  }
  void* p = nullptr;
  cuda_double_counters before{};
  cuda_double_counters after{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));
  EXPECT_EQ(after.stream_waits, before.stream_waits);
  EXPECT_EQ(after.events_recorded, before.events_recorded);
  for (cudaStream_t s : streams) {
    ASSERT_EQ(cuda_double_set_stream_busy(s, 0), 1);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
}

TEST_F(ShimInOrderFrees, AStreamTheShimDidNotSeeMadeIsFollowedFromItsFirstWork)
{
  issue_queued_frees();
  cudaStream_t made = nullptr;
  // Made behind the shim's back.
  ASSERT_EQ(cuda_double_create_stream_unfollowed(&made, CU_STREAM_NON_BLOCKING), 1);
  auto const unseen = reinterpret_cast<CUstream>(made);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, unseen, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuda_double_set_stream_busy(made, 1), 1);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);  // queued behind its work
  issue_queued_frees();
  ASSERT_EQ(cuda_double_set_stream_busy(made, 0), 1);
  EXPECT_EQ(cuStreamDestroy(unseen), CUDA_SUCCESS);
}

// ---- ShimInOrderFreesUnfollowed: the same after a lookup of a driver
// function the shim does not know, which ends followed submissions.

using ShimInOrderFreesUnfollowed = ShimTest;

TEST_F(ShimInOrderFreesUnfollowed, AreQueuedWhileTheProgramHasMoreThanFourNonBlockingStreams)
{
  void* future = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(cuGetProcAddress("cuDoubleFutureFunction", &future, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_SUCCESS);
  ASSERT_NE(future, nullptr);
  issue_queued_frees();
  std::vector<cudaStream_t> streams(5);
  for (cudaStream_t& s : streams) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  void* p = nullptr;
  cuda_double_counters before{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));
  issue_queued_frees();
  // Four: in order again, each of them waiting for the legacy stream at the free.
  EXPECT_EQ(cudaStreamDestroy(streams.back()), cudaSuccess);
  streams.pop_back();
  cuda_double_counters after{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));
  EXPECT_EQ(after.stream_waits, before.stream_waits + 4);
  // One of them has work in progress, given before the block was handed
  // out: queued all the same (the shim may not have seen the work).
  ASSERT_EQ(cuda_double_set_stream_busy(streams.front(), 1), 1);
  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));
  issue_queued_frees();
  ASSERT_EQ(cuda_double_set_stream_busy(streams.front(), 0), 1);
  for (cudaStream_t s : streams) {
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
}

// ---- ShimInOrderFreesPastTheShim: followed submissions end at a dlsym
// with RTLD_NEXT of a function that puts work on a stream (it finds the
// driver's own, which the shim does not see called).

using ShimInOrderFreesPastTheShim = ShimTest;

TEST_F(ShimInOrderFreesPastTheShim, AStreamWithWorkInProgressHoldsThemUpAgain)
{
  void* fn = nullptr;
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cuda_double_set_stream_busy(side, 1), 1);  // work given before the block is allocated
  void* p = nullptr;
  cuda_double_counters before{};
  cuda_double_counters after{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));  // followed: in order
  fn = dlsym(RTLD_NEXT, "cuLaunchKernel");
  EXPECT_NE(fn, nullptr);
  // No longer followed: the busy stream may be using any block.
  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));
  issue_queued_frees();
  ASSERT_EQ(cuda_double_set_stream_busy(side, 0), 1);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

// ---- ShimNewerDriver: a driver newer than the headers (CUDA_DOUBLE_NEWER_ABI:
// it reports 13010 and hands out newer ABIs of cuMemAlloc, cuStreamDestroy
// and cuCtxDestroy from that version on).

using ShimNewerDriver = ShimTest;

void* looked_up(char const* name, int version)
{
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS)
    << name << " at " << version;
  return fn;
}

// Whether `fn` is a function of the driver (double) itself, not the shim's.
bool in_the_driver(void* fn)
{
  Dl_info info{};
  return fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libcuda.so.1") != nullptr;
}

// A newer ABI's lookup gets the driver's function, never the hook of the old
// signature, and ends followed submissions (the shim no longer sees every
// call); the ABIs of the table's versions and older stay the shim's.
TEST_F(ShimNewerDriver, ANewerAbiIsTheDriversAndEndsFollowedSubmissions)
{
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cuda_double_set_stream_busy(side, 1), 1);
  void* p = nullptr;
  cuda_double_counters before{};
  cuda_double_counters after{};
  ASSERT_NO_FATAL_FAILURE(free_expecting_in_order(p, before, after));  // followed: in order
  EXPECT_FALSE(in_the_driver(looked_up("cuMemAlloc", 3020)));
  EXPECT_FALSE(in_the_driver(looked_up("cuStreamDestroy", 4000)));
  EXPECT_FALSE(in_the_driver(looked_up("cuDevicePrimaryCtxReset", 7000)));
  EXPECT_TRUE(in_the_driver(looked_up("cuMemAlloc", 13010)));
  EXPECT_TRUE(in_the_driver(looked_up("cuStreamDestroy", 13010)));
  // The newer ABI does nothing here: calling it shows whose it is.
  void* const newer_destroy = looked_up("cuCtxDestroy", 13010);
  EXPECT_TRUE(in_the_driver(newer_destroy));
  EXPECT_EQ(reinterpret_cast<CUresult (*)()>(newer_destroy)(), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));  // no longer followed
  issue_queued_frees();
  ASSERT_EQ(cuda_double_set_stream_busy(side, 0), 1);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

// ---- ShimRuntimeSubmissionsUnseen: the runtime's host functions reach the
// driver past the shim (CUDA_DOUBLE_RUNTIME_PRIVATE_SUBMISSIONS), as a runtime
// that submits through private entry points would. The check made before the
// first block is handed out finds it: no free relies on followed submissions.
// (ShimInOrderFreesPastTheShim's first free, in order beside a busy stream,
// shows the check passing where the runtime's work reaches the shim.)

using ShimRuntimeSubmissionsUnseen = ShimTest;

void CUDART_CB do_nothing(void* /*user_data*/) {}

TEST_F(ShimRuntimeSubmissionsUnseen, TheCheckBeforeTheFirstBlockEndsFollowedSubmissions)
{
  std::size_t const logged_before = log_text().size();  // the log file is appended to
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(side, do_nothing, nullptr), cudaSuccess);  // past the shim
  ASSERT_EQ(cuda_double_set_stream_busy(side, 1), 1);
  void* p = nullptr;
  cuda_double_counters before{};
  // The shim may not have seen the work in progress: queued, and fenced.
  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  std::string const log = log_text();
  EXPECT_NE(log.find("info: the shim cannot tell whether it sees the work the program's CUDA runtime puts on streams "
                     "(a host function launched through it went past the shim): a free under "
                     "ASYNCSHIM_ORDERING=device is made in the legacy stream's order only while no non-blocking "
                     "stream (at most 4) has work in progress\n",
                     logged_before),
            std::string::npos)
    << log;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the check leaves no error behind
  ASSERT_EQ(cuda_double_set_stream_busy(side, 0), 1);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

TEST_F(ShimInOrderFreesAfterRdma, SynchronousMemoryOperationsEndThemEvenWhenRefused)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // in order
  void* registered = nullptr;
  ASSERT_EQ(cudaMalloc(&registered, 1000), cudaSuccess);
  unsigned const yes = 1;
  auto before = cuda_double_get_counters();
  // Refused (not memory of the device): a program may go on and register it all the same.
  EXPECT_EQ(cuPointerSetAttribute(&yes, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, CUdeviceptr{0x1234}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);  // settled
  EXPECT_EQ(cuPointerSetAttribute(&yes, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(registered)),
            CUDA_SUCCESS);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(registered), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(registered), pool);  // queued
  issue_queued_frees();
}

TEST_F(ShimInOrderFreesAfterAContext, AContextOfTheProgramsOwnEndsThem)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  auto before = cuda_double_get_counters();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 1);

  CUcontext own = nullptr;
  before = cuda_double_get_counters();
  std::size_t const logged_before = log_text().size();  // the log file is appended to
  ASSERT_EQ(cuCtxCreate_v4(&own, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);  // settled
  std::string const log = log_text();
  EXPECT_NE(log.find("info: the program made a context: from now on frees under ASYNCSHIM_ORDERING=device are queued "
                     "and fenced instead of made in the legacy stream's order\n",
                     logged_before),
            std::string::npos)
    << log;
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);

  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));
  auto const queued = cuda_double_get_counters();
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  // No fence reaches the legacy and blocking streams of a context the program
  // made: the host waited for it, beside the program's own synchronization.
  EXPECT_EQ(cuda_double_get_counters().context_synchronizes, queued.context_synchronizes + 2);

  // Once destroyed (its work finished), the context is waited for no more.
  ASSERT_EQ(cuCtxDestroy_v2(own), CUDA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(free_expecting_queued(p, before));
  auto const queued_again = cuda_double_get_counters();
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cuda_double_get_counters().context_synchronizes, queued_again.context_synchronizes + 1);
}

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
  // One it does not: the cached blocks go to the pool (on the legacy stream) first.
  auto const before = cuda_double_get_counters();
  void* grows = nullptr;
  ASSERT_EQ(cudaMalloc(&grows, reserved - used + MiB / 2), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 2);
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

// ---- ShimFreeBacklog: device ordering with ASYNCSHIM_FREE_BACKLOG=4KiB

using ShimFreeBacklog = ShimTest;

TEST_F(ShimFreeBacklog, AFreeBeyondTheBacklogIssuesTheQueueAndWaitsForIt)
{
  issue_queued_frees();
  std::vector<void*> blocks(8);
  for (void*& p : blocks) {
    ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  }
  auto const before = cuda_double_get_counters();
  for (int i = 0; i < 4; ++i) {  // 4000 bytes wait: within the 4 KiB
    ASSERT_EQ(cudaFree(blocks[i]), cudaSuccess);
  }
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees);
  ASSERT_EQ(cudaFree(blocks[4]), cudaSuccess);  // 5000: the queue goes at once, fenced
  auto after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + 5);
  EXPECT_EQ(after.stream_waits, before.stream_waits + 1);
  // The fence's event on the legacy stream, and the batch's own on the shim's
  // stream, which the free waited for (the double completes everything at once).
  EXPECT_EQ(after.events_recorded, before.events_recorded + 2);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(cuda_double_pointer_kind(blocks[i]), unknown);
  }
  // Waited for, the issued frees no longer count: the next ones queue again.
  for (int i = 5; i < 8; ++i) {
    ASSERT_EQ(cudaFree(blocks[i]), cudaSuccess);
  }
  after = cuda_double_get_counters();
  EXPECT_EQ(after.pool_frees, before.pool_frees + 5);
  EXPECT_EQ(after.failed_calls, before.failed_calls);
  issue_queued_frees();
}

TEST_F(ShimFreeBacklog, AResetTakesTheIssuedFreesEventsAlong)
{
  issue_queued_frees();
  void* big = nullptr;
  ASSERT_EQ(cudaMalloc(&big, 64 * KiB), cudaSuccess);
  ASSERT_EQ(cudaFree(big), cudaSuccess);  // over the backlog by itself: issued and waited for
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, before.failed_calls);
  void* again = nullptr;  // a new pool, and its own batches
  ASSERT_EQ(cudaMalloc(&again, 64 * KiB), cudaSuccess);
  ASSERT_EQ(cudaFree(again), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(again), unknown);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, before.failed_calls);
}

// ---- ShimFenceRecordFails: a fence that cannot record on a stream (two devices)

using ShimFenceRecordFails = ShimTest;

TEST_F(ShimFenceRecordFails, TheFreeWaitsForTheDeviceInstead)
{
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // a current context on device 1
  cudaStream_t unseen = nullptr;
  ASSERT_EQ(cuda_double_create_stream_unfollowed(&unseen, cudaStreamNonBlocking), 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  // The shim first sees the stream here, with device 0 current: its event is
  // made there, and a record of it on the device-1 stream fails.
  ASSERT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(unseen), nullptr, nullptr),
            CUDA_SUCCESS);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();  // one context synchronization of the program's
  auto const after = cuda_double_get_counters();
  // The fence could not cover the stream: the host waited instead.
  EXPECT_EQ(after.context_synchronizes, before.context_synchronizes + 2);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
}

TEST_F(ShimFenceRecordFails, AStreamItCannotRecordOnIsWaitedForWhenDestroyed)
{
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  cudaStream_t unseen = nullptr;
  ASSERT_EQ(cuda_double_create_stream_unfollowed(&unseen, cudaStreamNonBlocking), 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(unseen), nullptr, nullptr),
            CUDA_SUCCESS);
  // The record standing for its last work fails: without it, the shim would
  // forget the stream while that work may still run.
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaStreamDestroy(unseen), cudaSuccess);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.stream_synchronizes, before.stream_synchronizes + 1);
}

// ---- ShimQueuedFrees: queued frees on a small device

using ShimQueuedFrees = ShimTest;

TEST_F(ShimQueuedFrees, AnAllocationThatFindsThePoolExhaustedIssuesTheQueue)
{
  void* a = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 48 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(a), cudaSuccess);  // queued: under 64 MiB, fewer than 64 frees
  EXPECT_EQ(cuda_double_pointer_kind(a), pool);
  void* b = nullptr;
  // The device has 16 MiB left: only the queued block can serve this.
  ASSERT_EQ(cudaMalloc(&b, 48 * MiB), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the retry left no error behind
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

TEST_F(ShimQueuedFrees, AResetTakesTheQueueWithThePool)
{
  void* kept = nullptr;
  void* freed = nullptr;
  ASSERT_EQ(cudaMalloc(&kept, 1000), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&freed, 1000), cudaSuccess);
  ASSERT_EQ(cudaFree(freed), cudaSuccess);  // queued
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().pools_destroyed, before.pools_destroyed + 1);
  EXPECT_EQ(cuda_double_live_allocations(), 0);  // both blocks went with the pool, each once
  EXPECT_EQ(cudaFree(freed), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(kept), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  void* after = nullptr;
  ASSERT_EQ(cudaMalloc(&after, 1000), cudaSuccess);  // a new pool; nothing stale is issued into it
  ASSERT_EQ(cudaFree(after), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_live_allocations(), 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(ShimQueuedFrees, ManyFreesDuringACaptureWaitForItsEnd)
{
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<void*> blocks(100);  // more than a batch
  for (void*& p : blocks) {
    ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  }
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
  for (void* p : blocks) {
    ASSERT_EQ(cudaFree(p), cudaSuccess);
  }
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees);  // none during the capture
  EXPECT_EQ(cuda_double_stream_is_capturing(stream), 1);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  std::size_t nodes = 99;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 0U);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees + 100);  // all at the end of the capture
  for (void* p : blocks) {
    EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// ---- ShimCapture: stream capture (docs/design.md, "Stream capture")

using ShimCapture = ShimTest;

struct capture_on_other_thread {
  // Begins a capture of a new non-blocking stream in `mode` on another thread
  // and keeps it going until end() is called.
  explicit capture_on_other_thread(cudaStreamCaptureMode mode)
  {
    worker = std::thread{[this, mode] {
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      began = cudaStreamBeginCapture(stream, mode);
      ready.store(true);
      while (!finish.load()) {
        std::this_thread::yield();
      }
      cudaGraph_t graph = nullptr;
      ended = cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr) { cudaGraphDestroy(graph); }
      cudaStreamDestroy(stream);
    }};
    while (!ready.load()) {
      std::this_thread::yield();
    }
  }
  cudaError_t end()
  {
    finish.store(true);
    worker.join();
    return ended;
  }
  cudaStream_t stream = nullptr;
  cudaError_t began = cudaErrorUnknown;
  cudaError_t ended = cudaErrorUnknown;
  std::atomic<bool> ready{false};
  std::atomic<bool> finish{false};
  std::thread worker;
};

TEST_F(ShimCapture, ForbiddenCallsFailAsNativelyAndInvalidateTheCapture)
{
  void* before_capture = nullptr;
  ASSERT_EQ(cudaMalloc(&before_capture, 1000), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1000), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaFree(before_capture), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cuda_double_stream_is_capturing(stream), 2);      // invalidated, as natively
  EXPECT_EQ(cuda_double_pointer_kind(before_capture), pool);  // not freed
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(before_capture), cudaSuccess);  // still the shim's, freed now
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(before_capture), unknown);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(ShimCapture, RelaxedCaptureOfTheThreadItselfIsNeverTouched)
{
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* before_capture = nullptr;
  ASSERT_EQ(cudaMalloc(&before_capture, 1000), cudaSuccess);
  auto const start = cuda_double_get_counters();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cudaFree(before_capture), cudaSuccess);
  // Deferred: not freed while the capture is in progress.
  EXPECT_EQ(cuda_double_pointer_kind(before_capture), pool);
  EXPECT_EQ(cuda_double_stream_is_capturing(stream), 1);
  EXPECT_EQ(cuda_double_get_counters().captured_operations, start.captured_operations);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  std::size_t nodes = 99;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 0U);  // the shim added nothing to the program's graph
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  // The end of the capture issued the deferred free.
  EXPECT_EQ(cuda_double_pointer_kind(before_capture), unknown);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(ShimCapture, AnotherThreadsThreadLocalCaptureDefersFrees)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  capture_on_other_thread capture{cudaStreamCaptureModeThreadLocal};
  ASSERT_EQ(capture.began, cudaSuccess);
  void* q = nullptr;
  EXPECT_EQ(cudaMalloc(&q, 1000), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);  // deferred
  EXPECT_EQ(cuda_double_stream_is_capturing(capture.stream), 1);
  EXPECT_EQ(capture.end(), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cudaFree(q), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(q), unknown);
}

TEST_F(ShimCapture, AnotherThreadsGlobalCaptureForbidsGlobalModeCalls)
{
  capture_on_other_thread capture{cudaStreamCaptureModeGlobal};
  ASSERT_EQ(capture.began, cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1000), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(capture.end(), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  // Relaxed: allowed.
  capture_on_other_thread again{cudaStreamCaptureModeGlobal};
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(again.end(), cudaSuccess);
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
}

// ---- ShimReset: device reset

using ShimReset = ShimTest;

TEST_F(ShimReset, ResetDropsThePoolAndTheNextAllocationMakesANewOne)
{
  void* before_reset = nullptr;
  ASSERT_EQ(cudaMalloc(&before_reset, 1000), cudaSuccess);
  cudaMemPool_t const first_pool = cuda_double_pointer_pool(before_reset);
  auto const start = cuda_double_get_counters();
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().pools_destroyed, start.pools_destroyed + 1);
  // As natively: the pointer is gone, freeing it is an invalid value.
  EXPECT_EQ(cudaFree(before_reset), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  void* after_reset = nullptr;
  ASSERT_EQ(cudaMalloc(&after_reset, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(after_reset), pool);
  EXPECT_EQ(cuda_double_get_counters().pools_created, start.pools_created + 1);
  EXPECT_NE(cuda_double_pointer_pool(after_reset), first_pool);
  EXPECT_EQ(cudaFree(after_reset), cudaSuccess);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(after_reset), unknown);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
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

// ---- ShimBadSetting: a setting that is not valid

using ShimBadSetting = ShimTest;

TEST_F(ShimBadSetting, SaysSoAndPassesEverythingThrough)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("error: ASYNCSHIM_RELEASE_THRESHOLD='lots' is not a valid size"), std::string::npos) << log;
  EXPECT_NE(log.find("asyncshim is disabled for this process"), std::string::npos) << log;
}

// ---- ShimDisabled: the shim disabled

using ShimDisabled = ShimTest;

TEST_F(ShimDisabled, EverythingGoesToTheNativeAllocator)
{
  auto const before = cuda_double_get_counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().pools_created, before.pools_created);
}

// ---- ShimUnsupportedExport: an export handle type the device lacks (the double
// lists posix fd and fabric only)

using ShimUnsupportedExport = ShimTest;

TEST_F(ShimUnsupportedExport, DevicePassesThroughWithAClearError)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);  // said once, still native
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("error: device 0: cannot create the asyncshim pool (initial size: none, the default; release "
                     "threshold: the device's total memory, the default; export handle type: win32, from "
                     "ASYNCSHIM_EXPORT_HANDLE_TYPE): export handle type win32 is not supported by device 0, whose "
                     "memory pools support: posix_file_descriptor, fabric (cudaDevAttrMemoryPoolSupportedHandleTypes "
                     "= 9). Set ASYNCSHIM_EXPORT_HANDLE_TYPE to a handle type the device supports, or to none. "
                     "cudaMalloc and cudaFree on device 0 go to the native allocator"),
            std::string::npos)
    << log;
  // For people: no source file, line or function of the shim's.
  EXPECT_EQ(log.find(".cpp"), std::string::npos) << log;
  EXPECT_EQ(log.find("try_"), std::string::npos) << log;
  EXPECT_EQ(log.find("cannot create"), log.rfind("cannot create")) << "said more than once:\n" << log;
}

// ---- ShimInfoLog: the info log, and a misspelt variable

using ShimInfoLog = ShimTest;

TEST_F(ShimInfoLog, PrintsSettingsRedirectionAndTypoWarnings)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("info: settings: "), std::string::npos) << log;
  EXPECT_NE(log.find("info: device 0: cudaMalloc is redirected to an asyncshim pool"), std::string::npos) << log;
  EXPECT_NE(log.find("warning: unknown variable ASYNCSHIM_INITAL_POOL_SIZE (ignored); did you mean "
                     "ASYNCSHIM_INITIAL_POOL_SIZE?"),
            std::string::npos)
    << log;
}

// ---- ShimCrossLevel: both levels intercepted; ShimDriverOnly: the driver level only

using ShimCrossLevel = ShimTest;

TEST_F(ShimCrossLevel, MemoryFromEitherLevelIsFreedThroughTheOther)
{
  void* runtime_ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&runtime_ptr, 4096), cudaSuccess);  // also makes a context current
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), pool);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(runtime_ptr)), CUDA_SUCCESS);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), unknown);
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees + 1);

  CUdeviceptr driver_ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&driver_ptr, 8192), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), pool);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(driver_ptr)), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_ERROR_INVALID_VALUE);  // a double free while queued, as natively
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), unknown);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_ERROR_INVALID_VALUE);  // and once issued
}

TEST_F(ShimCrossLevel, DriverEdgeCasesBehaveNatively)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);
  EXPECT_EQ(cuMemAlloc_v2(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
  p = 0xdead00;
  EXPECT_EQ(cuMemAlloc_v2(&p, std::size_t{1} << 50), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(p, 0U);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

using ShimDriverOnly = ShimTest;

TEST_F(ShimDriverOnly, OnlyTheDriverLevelIsIntercepted)
{
  void* runtime_ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&runtime_ptr, 4096), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), native);  // (the double's runtime calls no driver export)
  CUdeviceptr driver_ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&driver_ptr, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), pool);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_SUCCESS);
  EXPECT_EQ(cudaFree(runtime_ptr), cudaSuccess);
}

}  // namespace

// ---- ShimPeerAccess: peer access, two devices (docs/design.md, "Several GPUs")

using ShimPeerAccess = ShimTest;

constexpr int readwrite = 3;

TEST_F(ShimPeerAccess, PoolsFollowPeerAccessBeforeAndAfterTheyAreMade)
{
  // Device 0's pool exists before device 1 is given access to it.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* on0 = nullptr;
  ASSERT_EQ(cudaMalloc(&on0, 1000), cudaSuccess);
  cudaMemPool_t const pool0 = cuda_double_pointer_pool(on0);
  EXPECT_EQ(cuda_double_pool_access(pool0, 1), 0);
  auto const start = cuda_double_get_counters();

  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  EXPECT_EQ(cuda_double_pool_access(pool0, 1), readwrite);
  EXPECT_TRUE(cuda_double_can_access(1, on0));

  // Device 1 gives device 0 access before device 1's pool exists.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* on1 = nullptr;
  ASSERT_EQ(cudaMalloc(&on1, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pool_access(cuda_double_pointer_pool(on1), 0), readwrite);
  EXPECT_TRUE(cuda_double_can_access(0, on1));

  // The owner itself is never passed to cudaMemPoolSetAccess.
  EXPECT_EQ(cuda_double_get_counters().pool_access_owner_entries, start.pool_access_owner_entries);

  // Disabling takes the access away again, as natively.
  ASSERT_EQ(cudaDeviceDisablePeerAccess(0), cudaSuccess);  // from device 1 to device 0
  EXPECT_EQ(cuda_double_pool_access(pool0, 1), 0);
  EXPECT_FALSE(cuda_double_can_access(1, on0));
  // Errors of the program's calls are the native ones; the shim adds nothing.
  EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice);
  (void)cudaGetLastError();

  EXPECT_EQ(cudaFree(on1), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaFree(on0), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- ShimIpcHint: legacy IPC on a pool without an export handle type

using ShimIpcHint = ShimTest;

TEST_F(ShimIpcHint, FailingIpcHandleOnPoolMemoryGetsOneHint)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaIpcMemHandle_t handle{};
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, p), cudaErrorInvalidValue);  // as for any pool memory
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const text = log_text();
  EXPECT_NE(text.find("warning: cudaIpcGetMemHandle/cuIpcGetMemHandle failed with CUDA_ERROR_INVALID_VALUE (1: "
                      "invalid argument) on memory from the asyncshim pool"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("legacy IPC works on pool memory only with ASYNCSHIM_EXPORT_HANDLE_TYPE=auto (the default) or "
                      "posix_file_descriptor, and this pool has none"),
            std::string::npos)
    << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;  // once
}

// ---- ShimFabric: a fabric export handle type without IMEX

using ShimFabric = ShimTest;

TEST_F(ShimFabric, PoolIsMadeAndTheFailingExportIsExplained)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(log_text(), "");  // nothing said before the program exports
  cudaMemFabricHandle_t handle{};
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&handle, cuda_double_pointer_pool(p), cudaMemHandleTypeFabric, 0),
            cudaErrorNotPermitted);
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&handle, cuda_double_pointer_pool(p), cudaMemHandleTypeFabric, 0),
            cudaErrorNotPermitted);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotPermitted);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const text = log_text();
  EXPECT_NE(text.find("warning: ASYNCSHIM_EXPORT_HANDLE_TYPE=fabric: exporting the pool failed with "
                      "CUDA_ERROR_NOT_PERMITTED (800: CUDA_ERROR_NOT_PERMITTED): this system is not set up for fabric "
                      "handles (IMEX)"),
            std::string::npos)
    << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;  // once
}

// ---- ShimExportablePool: the pool can be exported (posix file descriptors)

using ShimExportablePool = ShimTest;

TEST_F(ShimExportablePool, PoolAndBlockCanBeExported)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaMemPool_t const found = cuda_double_pointer_pool(p);
  ASSERT_NE(found, nullptr);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_NE(found, default_pool);
  int fd = -1;
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, found, cudaMemHandleTypePosixFileDescriptor, 0), cudaSuccess);
  EXPECT_GE(fd, 0);
  cudaMemPoolPtrExportData data{};
  EXPECT_EQ(cudaMemPoolExportPointer(&data, p), cudaSuccess);
  if (fd >= 0) { close(fd); }
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimExportablePool, ABlockSharedThroughLegacyIpcIsQueuedNotFreedInOrder)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaIpcMemHandle_t handle{};
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, p), cudaSuccess);
  auto before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  // Queued: the next allocation on the legacy stream cannot have it at once
  // while another process may still read it.
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  // A block never shared is freed in order (no non-blocking stream here).
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 1);
  // A block exported after an in-order free: the work before that free is
  // waited for first (the settle point), as the importer may use it at once.
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
}
