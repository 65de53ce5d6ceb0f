// In-order frees and followed submissions, with libasyncshim.so preloaded into
// a program linked against the CUDA test double. The shim reads its settings
// once per process, so each suite runs in an environment of its own, stated in
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

// ---- ShimInOrderFrees: device ordering on one device, in-order frees on
// (the default); ShimInOrderFreesAfterAContext: the same, then a context of
// the program's own; ShimInOrderFreesAfterRdma: then memory set up for GPUDirect RDMA

using ShimInOrderFrees = ShimTest;

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

}  // namespace
