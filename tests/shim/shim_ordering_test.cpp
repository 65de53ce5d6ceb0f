// The orderings, fences and queued frees, with libasyncshim.so preloaded into a
// program linked against the CUDA test double. The shim reads its settings once
// per process, so each suite runs in an environment of its own, stated in
// tests/shim/CMakeLists.txt (shim_case) and checked at the start of each test
// (suite_environment.hpp).
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

}  // namespace
