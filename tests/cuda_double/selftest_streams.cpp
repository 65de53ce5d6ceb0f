// selftest_streams.cpp: tests of the CUDA TEST DOUBLES (cuda_double.hpp):
// streams, events, stream capture and graphs, device and primary context reset,
// through both APIs.
//
// CMake runs each suite in the configuration it is about (see
// selftest_support.hpp and tests/cuda_double/CMakeLists.txt).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "byte_literals.hpp"
#include "selftest_support.hpp"

namespace {

using namespace selftest;
using byte_literals::MiB;

// ------------------------------------------------------------ CudaDouble: streams, events, capture, reset

// Sets the calling thread's capture mode (driver API) for its lifetime.
class capture_mode_scope {
 public:
  explicit capture_mode_scope(CUstreamCaptureMode mode) : previous_(mode)
  {
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&previous_), CUDA_SUCCESS);
  }
  ~capture_mode_scope() { EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&previous_), CUDA_SUCCESS); }
  capture_mode_scope(capture_mode_scope const&) = delete;
  capture_mode_scope& operator=(capture_mode_scope const&) = delete;

 private:
  CUstreamCaptureMode previous_;
};

CUstreamCaptureStatus capture_status(CUstream s)
{
  auto status = static_cast<CUstreamCaptureStatus>(-1);
  EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  return status;
}

std::size_t graph_node_count(CUgraph g)
{
  std::size_t n = ~std::size_t{0};
  EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_SUCCESS);
  return n;
}

CUstream new_stream(unsigned flags = CU_STREAM_DEFAULT)
{
  CUstream s = nullptr;
  EXPECT_EQ(cuStreamCreate(&s, flags), CUDA_SUCCESS);
  return s;
}

CUevent new_event(unsigned flags = CU_EVENT_DEFAULT)
{
  CUevent e = nullptr;
  EXPECT_EQ(cuEventCreate(&e, flags), CUDA_SUCCESS);
  return e;
}

char const* const mode_names[] = {"global", "thread-local", "relaxed"};
CUstreamCaptureMode const modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                     CU_STREAM_CAPTURE_MODE_RELAXED};

TEST_F(CudaDouble, DriverStreamsWithPriorityFlagsQueryAndTheOldDestroy)
{
  CUstream s = nullptr, nb = nullptr;
  ASSERT_EQ(cuStreamCreateWithPriority(&s, CU_STREAM_DEFAULT, -100), CUDA_SUCCESS);  // clamped, not refused
  ASSERT_EQ(cuStreamCreateWithPriority(&nb, CU_STREAM_NON_BLOCKING, 3), CUDA_SUCCESS);
  CUstream bad = nullptr;
  EXPECT_EQ(cuStreamCreateWithPriority(&bad, 0x10, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreateWithPriority(nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  unsigned flags = 99;
  EXPECT_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cuStreamGetFlags(nb, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_STREAM_NON_BLOCKING});
  for (CUstream special : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    flags = 99;
    EXPECT_EQ(cuStreamGetFlags(special, &flags), CUDA_SUCCESS);
    EXPECT_EQ(flags, 0u);
  }
  EXPECT_EQ(cuStreamGetFlags_ptsz(nullptr, &flags), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamGetFlags(s, nullptr), CUDA_ERROR_INVALID_VALUE);
  auto const bogus = reinterpret_cast<CUstream>(std::uintptr_t{0x1234});
  EXPECT_EQ(cuStreamGetFlags(bogus, &flags), CUDA_ERROR_INVALID_HANDLE);

  // cuStreamQuery: everything is complete, and it is no synchronization event.
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 100, nb), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, nb), CUDA_SUCCESS);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery_ptsz(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(bogus), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * MiB);
  EXPECT_EQ(cuStreamSynchronize(nb), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);

  // The CUDA 2.0 cuStreamDestroy and cuStreamDestroy_v2 are the same.
  EXPECT_EQ(cuStreamDestroy_v1(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v1(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v1(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamGetFlags(nb, &flags), CUDA_ERROR_INVALID_HANDLE);

  std::thread([] {  // no current context
    CUstream t = nullptr;
    EXPECT_EQ(cuStreamCreateWithPriority(&t, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    unsigned f = 0;
    EXPECT_EQ(cuStreamGetFlags(CU_STREAM_LEGACY, &f), CUDA_ERROR_INVALID_CONTEXT);
    CUevent e = nullptr;
    EXPECT_EQ(cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  })
    .join();

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, 2u);
  EXPECT_EQ(c.streams_destroyed, 2u);
  EXPECT_EQ(c.stream_synchronizes, 1u);
  EXPECT_EQ(c.failed_calls, 13u);
}

TEST_F(CudaDouble, AStreamMarkedBusyIsNotReadyUntilMarkedIdle)
{
  CUstream nb = nullptr;
  ASSERT_EQ(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_SUCCESS);
  CUevent before = nullptr, during = nullptr;
  ASSERT_EQ(cuEventCreate(&before, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&during, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(before, nb), CUDA_SUCCESS);
  auto* const handle = reinterpret_cast<cudaStream_t>(nb);
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 1), 1);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);  // only that stream
  ASSERT_EQ(cuEventRecord(during, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_record_stream(), handle);
  EXPECT_EQ(cuEventQuery(during), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(before), CUDA_SUCCESS);  // recorded before
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 0), 1);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(during), CUDA_SUCCESS);
  // A synchronization completes the event, and the stream's its stream.
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 1), 1);
  ASSERT_EQ(cuEventRecord(during, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(during), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(during), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamSynchronize(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_SUCCESS);
  // An event of an earlier busy spell is not held up by a later one.
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 1), 1);
  ASSERT_EQ(cuEventRecord(during, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 0), 1);
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 1), 1);
  EXPECT_EQ(cuEventQuery(during), CUDA_SUCCESS);
  // Destroyed: its events still follow it.
  ASSERT_EQ(cuEventRecord(during, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(during), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuda_double_set_stream_busy(handle, 0), 1);
  EXPECT_EQ(cuEventQuery(during), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_set_stream_busy(nullptr, 1), 0);  // not a created stream
  // The order of records, waits and frees.
  cuda_double_reset_counters();
  EXPECT_EQ(cuda_double_last_serial(CUDA_DOUBLE_EVENT_RECORD), 0u);
  EXPECT_EQ(cuda_double_last_record_stream(), CUDA_DOUBLE_NO_STREAM);
  ASSERT_EQ(cuEventRecord(before, CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_record_stream(), CU_STREAM_LEGACY);
  ASSERT_EQ(cuStreamWaitEvent(CU_STREAM_LEGACY, before, 0), CUDA_SUCCESS);
  EXPECT_LT(cuda_double_last_serial(CUDA_DOUBLE_EVENT_RECORD), cuda_double_last_serial(CUDA_DOUBLE_STREAM_WAIT));
  EXPECT_EQ(cuda_double_last_serial(CUDA_DOUBLE_FREE_ASYNC), 0u);
  EXPECT_EQ(cuda_double_last_serial(0), 0u);
  EXPECT_EQ(cuEventDestroy_v2(before), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(during), CUDA_SUCCESS);
}

TEST_F(CudaDouble, RuntimeStreamsReachTheDriver)
{
  cudaStream_t s = nullptr, nb = nullptr, prio = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&prio, cudaStreamNonBlocking, -1), cudaSuccess);
  cudaStream_t bad = nullptr;
  EXPECT_EQ(cudaStreamCreateWithPriority(&bad, 0x10, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  unsigned flags = 99;
  EXPECT_EQ(cudaStreamGetFlags(prio, &flags), cudaSuccess);
  EXPECT_EQ(flags, unsigned{cudaStreamNonBlocking});
  EXPECT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cudaStreamGetFlags(nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nb), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto const bogus = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1234});
  EXPECT_EQ(cudaStreamQuery(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  for (cudaStream_t x : {s, nb, prio}) {
    EXPECT_EQ(cudaStreamDestroy(x), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, 3u);  // counted by the driver functions the runtime called
  EXPECT_EQ(c.streams_destroyed, 3u);
  EXPECT_EQ(c.stream_synchronizes, 1u);
  EXPECT_EQ(c.context_synchronizes, 1u);
  // A runtime call that failed in the driver counts once, not twice.
  EXPECT_EQ(c.failed_calls, 4u);
}

TEST_F(CudaDouble, DriverEvents)
{
  CUevent e = nullptr, timing_off = nullptr, ipc = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&timing_off, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUevent bad = nullptr;
  EXPECT_EQ(cuEventCreate(&bad, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);  // needs DISABLE_TIMING
  EXPECT_EQ(cuEventCreate(&bad, 0x8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);

  // Complete before the first record, and as soon as recorded.
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  CUstream s = new_stream();
  for (CUstream where : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, s}) {
    EXPECT_EQ(cuEventRecord(e, where), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuEventRecord_ptsz(timing_off, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);

  EXPECT_EQ(cuda_double_last_wait_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), s);
  EXPECT_EQ(cuStreamWaitEvent_ptsz(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), CU_STREAM_PER_THREAD);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), nullptr);
  EXPECT_EQ(cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL), CUDA_ERROR_INVALID_VALUE);  // only in a capture
  EXPECT_EQ(cuStreamWaitEvent(s, e, 2), CUDA_ERROR_INVALID_VALUE);

  auto const bogus_stream = reinterpret_cast<CUstream>(std::uintptr_t{0x1234});
  auto const bogus_event = reinterpret_cast<CUevent>(std::uintptr_t{0x1234});
  EXPECT_EQ(cuEventRecord(e, bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(bogus_event, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(nullptr, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamWaitEvent(s, bogus_event, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(bogus_event), CUDA_ERROR_INVALID_HANDLE);

  std::thread([&] {  // destroying, querying and synchronizing need no context
    EXPECT_EQ(cuEventSynchronize(timing_off), CUDA_SUCCESS);
    EXPECT_EQ(cuEventDestroy_v2(timing_off), CUDA_SUCCESS);
    EXPECT_EQ(cuEventRecord(e, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  })
    .join();
  EXPECT_EQ(cuEventDestroy_v2(timing_off), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(ipc), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.events_recorded, 5u);
  EXPECT_EQ(c.stream_waits, 3u);
  EXPECT_EQ(c.captured_operations, 0u);
  EXPECT_EQ(c.failed_calls, 17u);
}

TEST_F(CudaDouble, EventsAcrossDevices)
{
  if (devices_ < 2) { GTEST_SKIP() << "one device"; }
  CUstream s0 = new_stream();  // device 0 (SetUp made its context current)
  ASSERT_EQ(cuCtxSetCurrent(primary_context(1)), CUDA_SUCCESS);
  CUevent e1 = new_event();  // device 1
  CUstream s1 = new_stream();
  EXPECT_EQ(cuEventRecord(e1, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e1, nullptr), CUDA_SUCCESS);          // device 1's legacy stream
  EXPECT_EQ(cuEventRecord(e1, s0), CUDA_ERROR_INVALID_HANDLE);  // event and stream of different devices
  ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e1, nullptr), CUDA_ERROR_INVALID_HANDLE);  // now device 0's legacy stream
  EXPECT_EQ(cuEventRecord(e1, CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
  // A stream may wait on an event of another device (cuda.h says so).
  EXPECT_EQ(cuStreamWaitEvent(s0, e1, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, e1, 0), CUDA_SUCCESS);
  // The runtime: an event of device 0 recorded on a device-1 stream.
  cudaEvent_t e0 = nullptr;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(s1, e0, 0), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e0), cudaSuccess);
  EXPECT_EQ(cuEventDestroy_v2(e1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.events_recorded, 2u);
  EXPECT_EQ(c.stream_waits, 3u);
  EXPECT_EQ(c.failed_calls, 4u);
}

TEST_F(CudaDouble, RuntimeEventsReachTheDriver)
{
  cudaEvent_t e = nullptr, f = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&f, cudaEventDisableTiming), cudaSuccess);
  cudaEvent_t bad = nullptr;
  EXPECT_EQ(cudaEventCreateWithFlags(&bad, cudaEventInterprocess), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreate(nullptr), cudaErrorInvalidValue);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(f, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(f), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(cudaStreamPerThread, e, 0), cudaSuccess);
  EXPECT_EQ(cuda_double_last_wait_stream(), cudaStreamPerThread);
  EXPECT_EQ(cudaStreamWaitEvent(s, e, cudaEventWaitExternal), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(f), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.events_recorded, 2u);
  EXPECT_EQ(c.stream_waits, 1u);
  EXPECT_EQ(c.failed_calls, 5u);  // once per failing runtime call
}

TEST_F(CudaDouble, DriverCaptureTurnsWorkIntoNodes)
{
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUstream s = new_stream();
  CUstream nb = new_stream(CU_STREAM_NON_BLOCKING);
  CUevent e = new_event();
  CUdeviceptr outside = 0;  // allocated before the capture
  ASSERT_EQ(cuMemAllocAsync(&outside, 64, s), CUDA_SUCCESS);

  // What cannot be captured, and bad arguments.
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, static_cast<CUstreamCaptureMode>(3)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCapture_v2(reinterpret_cast<CUstream>(std::uintptr_t{0x1234}), CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_HANDLE);
  CUgraph g = reinterpret_cast<CUgraph>(std::uintptr_t{1});
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(capture_status(CU_STREAM_LEGACY), CU_STREAM_CAPTURE_STATUS_NONE);

  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuda_double_stream_is_capturing(s), 1);
  EXPECT_EQ(capture_status(nb), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamIsCapturing(s, nullptr), CUDA_ERROR_INVALID_VALUE);
  // The legacy stream while a blocking stream captures: IMPLICIT, nothing invalidated.
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(nullptr, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);

  // Work on the capturing stream becomes nodes; none of it runs.
  std::size_t const live_before = static_cast<std::size_t>(cuda_double_live_allocations());
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 100, s), CUDA_SUCCESS);  // 1
  ASSERT_NE(a, 0u);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 2);  // usable, a fresh pool allocation
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(a)), default_pool);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, 64, default_pool, s), CUDA_SUCCESS);  // 2
  EXPECT_EQ(cuda_double_last_alloc_stream(), s);
  EXPECT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);                              // 3
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);                       // 4
  EXPECT_EQ(cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);  // 5
  EXPECT_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);                             // 6: frees nothing
  EXPECT_EQ(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);                 // not twice in one capture
  EXPECT_EQ(cuMemFreeAsync(outside, s), CUDA_SUCCESS);                       // 7: frees nothing either
  EXPECT_EQ(cuda_double_last_free_stream(), s);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 2);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(outside)), 2);
  EXPECT_EQ(static_cast<std::size_t>(cuda_double_live_allocations()), live_before + 2);
  // Work on other streams runs as usual.
  CUdeviceptr c = 0;
  ASSERT_EQ(cuMemAllocAsync(&c, 16, nb), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(c, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(c)), 0);
  auto counters = cuda_double_get_counters();
  EXPECT_EQ(counters.captures_begun, 1u);
  EXPECT_EQ(counters.captured_operations, 7u);
  EXPECT_EQ(counters.pool_allocs, 2u);  // outside and c, not the captured ones
  EXPECT_EQ(counters.pool_frees, 1u);
  EXPECT_EQ(counters.events_recorded, 0u);
  EXPECT_EQ(counters.stream_waits, 0u);
  EXPECT_EQ(counters.free_async_blocking_stream, 2u);  // captured frees are calls too
  EXPECT_EQ(counters.free_async_non_blocking_stream, 1u);

  EXPECT_EQ(cuStreamEndCapture(s, nullptr), CUDA_ERROR_INVALID_VALUE);
  g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuda_double_stream_is_capturing(s), 0);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(capture_status(CU_STREAM_LEGACY), CU_STREAM_CAPTURE_STATUS_NONE);

  // The graph: its nodes, as cuda.h describes cuGraphGetNodes.
  EXPECT_EQ(graph_node_count(g), 7u);
  CUgraphNode nodes[9];
  std::size_t n = 9;
  ASSERT_EQ(cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 7u);
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_NE(nodes[i], nullptr);
    for (std::size_t j = 0; j < i; ++j) {
      EXPECT_NE(nodes[i], nodes[j]);
    }
  }
  EXPECT_EQ(nodes[7], nullptr);
  EXPECT_EQ(nodes[8], nullptr);
  n = 2;
  ASSERT_EQ(cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(cuGraphGetNodes(g, nodes, nullptr), CUDA_ERROR_INVALID_VALUE);

  // The captured allocations are the graph's: they go with it. The capture
  // freed nothing, so `outside` is still the program's to free.
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 0);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(b)), 0);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(outside)), 2);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(outside, s), CUDA_SUCCESS);

  // e was last recorded in the capture.
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuStreamWaitEvent(nb, e, 0), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuEventRecord(e, nb), CUDA_SUCCESS);  // recorded outside again
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);

  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
  counters = cuda_double_get_counters();
  EXPECT_EQ(counters.captures_invalidated, 0u);
  EXPECT_EQ(counters.events_recorded, 1u);
}

TEST_F(CudaDouble, CaptureModesOnTheCapturingThread)
{
  // A potentially unsafe call (cuMemAlloc_v2) on the thread that captures:
  // prohibited unless the capture or the thread is relaxed.
  CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
  int invalidated = 0;
  for (int cm = 0; cm < 3; ++cm) {
    for (int tm = 0; tm < 3; ++tm) {
      SCOPED_TRACE(std::string("capture ") + mode_names[cm] + ", thread " + mode_names[tm]);
      bool const prohibited = cm != CU_STREAM_CAPTURE_MODE_RELAXED && tm != CU_STREAM_CAPTURE_MODE_RELAXED;
      ASSERT_EQ(cuStreamBeginCapture_v2(s, modes[cm]), CUDA_SUCCESS);
      int const live = cuda_double_live_allocations();
      {
        capture_mode_scope mode(modes[tm]);
        CUdeviceptr p = 0;
        if (prohibited) {
          EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
          EXPECT_EQ(cuda_double_live_allocations(), live);  // nothing done
          ++invalidated;
        } else {
          ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
          EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
        }
      }
      EXPECT_EQ(capture_status(s), prohibited ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE);
      // Work for an invalidated capture is refused.
      CUdeviceptr q = 0;
      EXPECT_EQ(cuMemAllocAsync(&q, 16, s), prohibited ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
      CUgraph g = reinterpret_cast<CUgraph>(std::uintptr_t{1});
      if (prohibited) {
        EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        EXPECT_EQ(g, nullptr);
      } else {
        ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
        EXPECT_EQ(graph_node_count(g), 1u);
        EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
      }
      EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
      EXPECT_EQ(cuda_double_live_allocations(), live);
    }
  }
  EXPECT_EQ(invalidated, 4);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_begun, 9u);
  EXPECT_EQ(c.captures_invalidated, 4u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaDouble, CaptureModesOfOtherThreads)
{
  // A capture on this thread; a potentially unsafe call on another thread is
  // prohibited only when both the capture and that thread are in global mode.
  CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
  CUcontext const c0 = primary_context(0);
  for (int cm = 0; cm < 3; ++cm) {
    for (int tm = 0; tm < 3; ++tm) {
      SCOPED_TRACE(std::string("capture ") + mode_names[cm] + ", other thread " + mode_names[tm]);
      bool const prohibited = cm == CU_STREAM_CAPTURE_MODE_GLOBAL && tm == CU_STREAM_CAPTURE_MODE_GLOBAL;
      ASSERT_EQ(cuStreamBeginCapture_v2(s, modes[cm]), CUDA_SUCCESS);
      std::thread([&] {
        ASSERT_EQ(cuCtxSetCurrent(c0), CUDA_SUCCESS);
        capture_mode_scope mode(modes[tm]);
        CUdeviceptr p = 0;
        if (prohibited) {
          EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
          EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        } else {
          ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
          EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
          EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
        }
      }).join();
      CUgraph g = nullptr;
      EXPECT_EQ(cuStreamEndCapture(s, &g), prohibited ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
      if (g != nullptr) { EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS); }
    }
  }
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_invalidated, 1u);
  EXPECT_EQ(c.context_synchronizes, 8u);

  // The other way round: another thread's global capture prohibits this
  // (global) thread's unsafe call, and is what gets invalidated.
  CUstream t = new_stream(CU_STREAM_NON_BLOCKING);
  std::promise<void> begun, checked;
  std::thread other([&] {
    EXPECT_EQ(cuStreamBeginCapture_v2(t, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    begun.set_value();
    checked.get_future().wait();
    CUgraph g = reinterpret_cast<CUgraph>(std::uintptr_t{1});
    EXPECT_EQ(cuStreamEndCapture(t, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(g, nullptr);
  });
  begun.get_future().wait();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuda_double_stream_is_capturing(t), 2);
  {
    capture_mode_scope local(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);  // other threads ignored
    ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  checked.set_value();
  other.join();
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(t), CUDA_SUCCESS);
}

TEST_F(CudaDouble, EveryPotentiallyUnsafeCallIsProhibitedInAGlobalCapture)
{
  CUstream capturing = new_stream(CU_STREAM_NON_BLOCKING);  // non-blocking: no IMPLICIT
  CUstream other = new_stream();
  CUevent e = new_event();
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUdeviceptr dp = 0, pp = 0;
  ASSERT_EQ(cuMemAlloc_v2(&dp, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&pp, 64, other), CUDA_SUCCESS);
  void* rp = nullptr;
  ASSERT_EQ(cudaMalloc(&rp, 64), cudaSuccess);

  struct call_case {
    char const* what;
    std::function<int()> call;  // a CUresult or a cudaError_t
    int prohibited;             // what it returns then
  };
  CUdeviceptr out = 0;
  void* rout = nullptr;
  int const unsupported = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int const rt_unsupported = cudaErrorStreamCaptureUnsupported;
  std::vector<call_case> const calls = {
    {"cuMemAlloc_v2", [&] { return int(cuMemAlloc_v2(&out, 16)); }, unsupported},
    {"cuMemFree_v2", [&] { return int(cuMemFree_v2(dp)); }, unsupported},
    {"cuCtxSynchronize", [&] { return int(cuCtxSynchronize()); }, unsupported},
    {"cuStreamSynchronize", [&] { return int(cuStreamSynchronize(other)); }, unsupported},
    {"cuStreamSynchronize_ptsz", [&] { return int(cuStreamSynchronize_ptsz(nullptr)); }, unsupported},
    {"cuStreamQuery", [&] { return int(cuStreamQuery(other)); }, unsupported},
    {"cuEventSynchronize", [&] { return int(cuEventSynchronize(e)); }, unsupported},
    {"cuEventQuery", [&] { return int(cuEventQuery(e)); }, unsupported},
    {"cuMemAllocAsync legacy", [&] { return int(cuMemAllocAsync(&out, 16, nullptr)); }, unsupported},
    {"cuMemAllocFromPoolAsync legacy",
     [&] { return int(cuMemAllocFromPoolAsync(&out, 16, default_pool, CU_STREAM_LEGACY)); }, unsupported},
    {"cuMemFreeAsync legacy", [&] { return int(cuMemFreeAsync(pp, nullptr)); }, unsupported},
    {"cuMemFreeAsync_ptsz legacy", [&] { return int(cuMemFreeAsync_ptsz(pp, CU_STREAM_LEGACY)); }, unsupported},
    {"cuEventRecord legacy", [&] { return int(cuEventRecord(e, nullptr)); }, unsupported},
    {"cudaMalloc", [&] { return int(cudaMalloc(&rout, 16)); }, rt_unsupported},
    {"cudaFree", [&] { return int(cudaFree(rp)); }, rt_unsupported},
    {"cudaDeviceSynchronize", [&] { return int(cudaDeviceSynchronize()); }, rt_unsupported},
    {"cudaStreamSynchronize", [&] { return int(cudaStreamSynchronize(other)); }, rt_unsupported},
    {"cudaStreamQuery", [&] { return int(cudaStreamQuery(nullptr)); }, rt_unsupported},
    {"cudaEventQuery", [&] { return int(cudaEventQuery(e)); }, rt_unsupported},
    {"cudaEventSynchronize", [&] { return int(cudaEventSynchronize(e)); }, rt_unsupported},
    {"cudaMallocAsync legacy", [&] { return int(cudaMallocAsync(&rout, 16, nullptr)); }, rt_unsupported},
    {"cudaMallocFromPoolAsync legacy",
     [&] { return int(cudaMallocFromPoolAsync(&rout, 16, default_pool, cudaStreamLegacy)); }, rt_unsupported},
    {"cudaFreeAsync legacy", [&] { return int(cudaFreeAsync(as_pointer(pp), cudaStreamLegacy)); }, rt_unsupported},
    {"cudaEventRecord legacy", [&] { return int(cudaEventRecord(e, nullptr)); }, rt_unsupported},
  };
  int const live = cuda_double_live_allocations();
  for (call_case const& call : calls) {
    SCOPED_TRACE(call.what);
    ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(call.call(), call.prohibited);
    EXPECT_EQ(capture_status(capturing), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_EQ(cuda_double_live_allocations(), live);  // nothing allocated or freed
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture(capturing, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // In relaxed mode the same call is allowed (the allocations are undone).
    ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    {
      capture_mode_scope relaxed(CU_STREAM_CAPTURE_MODE_RELAXED);
      out = 0;
      rout = nullptr;
      EXPECT_EQ(call.call(), 0);
    }
    ASSERT_EQ(cuStreamEndCapture(capturing, &g), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    if (out != 0) { EXPECT_EQ(cuMemFree_v2(out), CUDA_SUCCESS); }
    if (rout != nullptr) { EXPECT_EQ(cudaFree(rout), cudaSuccess); }
    if (cuda_double_pointer_kind(as_pointer(dp)) == 0) { ASSERT_EQ(cuMemAlloc_v2(&dp, 64), CUDA_SUCCESS); }
    if (cuda_double_pointer_kind(rp) == 0) { ASSERT_EQ(cudaMalloc(&rp, 64), cudaSuccess); }
    if (cuda_double_pointer_kind(as_pointer(pp)) == 0) { ASSERT_EQ(cuMemAllocAsync(&pp, 64, other), CUDA_SUCCESS); }
  }
  EXPECT_EQ(cuda_double_get_counters().captures_invalidated, calls.size());
  (void)cudaGetLastError();

  // Not potentially unsafe: stream-ordered work on other (non-legacy) streams,
  // events recorded there, waits, queries of the capture state.
  ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&out, 16, other), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(out, other), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync_ptsz(&out, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(out, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e, other), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(other, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(other), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(capture_status(capturing), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(capturing, &g), CUDA_SUCCESS);
  EXPECT_EQ(graph_node_count(g), 0u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // A capturing stream itself can never be synchronized or queried.
  ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(capturing), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(capturing), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamSynchronize(capturing), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(capturing, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  EXPECT_EQ(cuMemFree_v2(dp), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(pp, other), CUDA_SUCCESS);
  EXPECT_EQ(cudaFree(rp), cudaSuccess);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(capturing), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(other), CUDA_SUCCESS);
}

TEST_F(CudaDouble, LegacyStreamCallsDuringABlockingCaptureAreImplicit)
{
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUstream blocking = new_stream();
  CUstream nb = new_stream(CU_STREAM_NON_BLOCKING);
  CUevent e = new_event();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 64, nb), CUDA_SUCCESS);
  CUgraph g = nullptr;

  // A legacy-stream call, prohibited while a blocking stream of the device
  // captures: IMPLICIT; a call not on the legacy stream: UNSUPPORTED.
  auto const legacy_calls = std::vector<std::function<CUresult()>>{
    [&] { return cuMemAllocAsync(&p, 16, nullptr); },
    [&] { return cuMemAllocFromPoolAsync(&p, 16, default_pool, CU_STREAM_LEGACY); },
    [&] { return cuMemFreeAsync(p, CU_STREAM_LEGACY); },
    [&] { return cuEventRecord(e, nullptr); },
    [&] { return cuStreamSynchronize(nullptr); },
    [&] { return cuStreamQuery(CU_STREAM_LEGACY); },
  };
  for (std::size_t i = 0; i < legacy_calls.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(legacy_calls[i](), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_EQ(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // A non-blocking capture: the same call is merely unsupported.
    ASSERT_EQ(cuStreamBeginCapture_v2(nb, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(legacy_calls[i](), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_EQ(cuStreamEndCapture(nb, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAlloc_v2(&q, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // not a legacy-stream call
  EXPECT_EQ(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // Not prohibited (relaxed thread): legacy-stream calls work normally.
  ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  {
    capture_mode_scope relaxed(CU_STREAM_CAPTURE_MODE_RELAXED);
    ASSERT_EQ(cuMemAllocAsync(&q, 16, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeAsync(q, CU_STREAM_LEGACY), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(q)), 0);
  }
  ASSERT_EQ(cuStreamEndCapture(blocking, &g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // The per-thread default stream is blocking too.
  ASSERT_EQ(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocAsync(&q, 16, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(cuStreamEndCapture_ptsz(nullptr, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  if (devices_ >= 2) {
    // A blocking capture on device 1 makes device 0's legacy stream merely unsupported.
    ASSERT_EQ(cuCtxSetCurrent(primary_context(1)), CUDA_SUCCESS);
    CUstream b1 = new_stream();
    ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamBeginCapture_v2(b1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_SUCCESS);  // device 0's
    EXPECT_EQ(cuMemAllocAsync(&q, 16, nullptr), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_EQ(cuStreamEndCapture(b1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(cuStreamDestroy_v2(b1), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuMemFreeAsync(p, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
}

TEST_F(CudaDouble, EndCaptureFromAnotherThread)
{
  CUstream s = new_stream();
  for (int cm = 0; cm < 3; ++cm) {
    SCOPED_TRACE(mode_names[cm]);
    ASSERT_EQ(cuStreamBeginCapture_v2(s, modes[cm]), CUDA_SUCCESS);
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocAsync(&p, 16, s), CUDA_SUCCESS);
    bool const relaxed = modes[cm] == CU_STREAM_CAPTURE_MODE_RELAXED;
    CUgraph g = nullptr;
    std::thread([&] {
      EXPECT_EQ(cuStreamEndCapture(s, &g), relaxed ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    }).join();
    if (!relaxed) {
      EXPECT_EQ(g, nullptr);
      EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);  // goes on
      ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    }
    EXPECT_EQ(graph_node_count(g), 1u);
    EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  }
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 2u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaDouble, PerThreadDefaultStreamCapture)
{
  ASSERT_EQ(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuda_double_stream_is_capturing(CU_STREAM_PER_THREAD), 1);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing_ptsz(nullptr, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  std::thread([] {  // another thread's per-thread stream is another stream
    ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
    EXPECT_EQ(capture_status(CU_STREAM_PER_THREAD), CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT_EQ(cuda_double_stream_is_capturing(CU_STREAM_PER_THREAD), 0);
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocAsync_ptsz(&p, 16, nullptr), CUDA_SUCCESS);  // runs
    EXPECT_EQ(cuMemFreeAsync_ptsz(p, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture_ptsz(nullptr, &g), CUDA_ERROR_ILLEGAL_STATE);
  })
    .join();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync_ptsz(&p, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync_ptsz(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 2);  // captured: not freed
  CUevent e = new_event();
  EXPECT_EQ(cuEventRecord_ptsz(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent_ptsz(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), CU_STREAM_PER_THREAD);
  EXPECT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture_ptsz(nullptr, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);  // an invalidated capture's memory goes at once
  // The plain entry points' null stream is the legacy stream.
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&p, 16, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g), CUDA_SUCCESS);
  EXPECT_EQ(graph_node_count(g), 1u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.free_async_per_thread_stream, 2u);
  EXPECT_EQ(c.captures_begun, 2u);
  EXPECT_EQ(c.captured_operations, 5u);
}

TEST_F(CudaDouble, CapturesEndWithTheirStreamAndDoNotMerge)
{
  CUstream s1 = new_stream(), s2 = new_stream(), plain = new_stream();
  ASSERT_EQ(cuStreamBeginCapture_v2(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s2, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUevent e = new_event();
  EXPECT_EQ(cuEventRecord(e, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
  EXPECT_EQ(cuStreamWaitEvent(s1, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(plain, e, 0), CUDA_ERROR_NOT_SUPPORTED);  // joining a capture: not modelled
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 16, s1), CUDA_SUCCESS);
  // Destroying a capturing stream ends its capture; its memory goes.
  EXPECT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(s1, &st), CUDA_ERROR_INVALID_HANDLE);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s2, &g), CUDA_SUCCESS);
  EXPECT_EQ(graph_node_count(g), 0u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(plain, e, 0), CUDA_ERROR_CAPTURED_EVENT);  // its capture is over
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(plain), CUDA_SUCCESS);
}

TEST_F(CudaDouble, FreeAsyncCountedByKindOfStream)
{
  CUstream blocking = new_stream(), nb = new_stream(CU_STREAM_NON_BLOCKING);
  auto const round = [](CUstream alloc_on, auto free) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocAsync(&p, 16, alloc_on), CUDA_SUCCESS);
    EXPECT_EQ(free(p), CUDA_SUCCESS);
  };
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync(p, nullptr); });                // legacy
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync(p, CU_STREAM_LEGACY); });       // legacy
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync_ptsz(p, CU_STREAM_LEGACY); });  // legacy
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync_ptsz(p, nullptr); });           // per-thread
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync(p, CU_STREAM_PER_THREAD); });   // per-thread
  round(nb, [&](CUdeviceptr p) { return cuMemFreeAsync(p, blocking); });              // blocking
  round(nb, [&](CUdeviceptr p) { return cuMemFreeAsync_ptsz(p, nb); });               // non-blocking
  void* r = nullptr;
  ASSERT_EQ(cudaMallocAsync(&r, 16, nb), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(r, nb), cudaSuccess);                // the runtime's: not counted by kind
  EXPECT_EQ(cuMemFreeAsync(0, nb), CUDA_ERROR_INVALID_VALUE);  // failures are not counted
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.free_async_legacy_stream, 3u);
  EXPECT_EQ(c.free_async_per_thread_stream, 2u);
  EXPECT_EQ(c.free_async_blocking_stream, 1u);
  EXPECT_EQ(c.free_async_non_blocking_stream, 1u);
  EXPECT_EQ(c.pool_frees, 8u);
  cuda_double_reset_counters();
  c = cuda_double_get_counters();
  EXPECT_EQ(c.free_async_legacy_stream + c.free_async_per_thread_stream + c.free_async_blocking_stream +
              c.free_async_non_blocking_stream,
            0u);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
}

TEST_F(CudaDouble, CaptureModeIsPerThread)
{
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the default
  std::thread([] {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);  // needs no context
    EXPECT_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
    cudaStreamCaptureMode rm = cudaStreamCaptureModeGlobal;
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&rm), cudaSuccess);  // the same mode for the runtime
    EXPECT_EQ(rm, cudaStreamCaptureModeThreadLocal);
  }).join();
  mode = static_cast<CUstreamCaptureMode>(3);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
  cudaStreamCaptureMode rm = cudaStreamCaptureModeGlobal;
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&rm), cudaSuccess);
  EXPECT_EQ(rm, cudaStreamCaptureModeRelaxed);  // unchanged by the refused calls
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, ThreadLocalCapturesOnManyThreads)
{
  // Threads capturing in thread-local mode do not disturb each other, nor a
  // global-mode thread's potentially unsafe calls.
  constexpr int thread_count = 6;
  constexpr int iterations = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([] {
      ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
      CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
      for (int i = 0; i < iterations; ++i) {
        ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
        CUdeviceptr p = 0;
        ASSERT_EQ(cuMemAllocAsync(&p, 64, s), CUDA_SUCCESS);
        ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
        CUgraph g = nullptr;
        ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
        ASSERT_EQ(graph_node_count(g), 2u);
        ASSERT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
      }
      ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    });
  }
  for (int i = 0; i < iterations; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAlloc_v2(&p, 64), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  for (auto& t : threads) {
    t.join();
  }
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_begun, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.captured_operations, 2 * std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.captures_invalidated, 0u);
  EXPECT_EQ(c.failed_calls, 0u);
}

TEST_F(CudaDouble, RuntimeCaptures)
{
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);

  // cudaMalloc while another stream of this thread captures in global mode:
  // unsupported, and the capture is invalidated (as on an H200).
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(cudaMallocAsync(&p, 16, s), cudaErrorStreamCaptureInvalidated);
  g = reinterpret_cast<cudaGraph_t>(std::uintptr_t{1});
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorStreamCaptureInvalidated);

  // cudaMallocFromPoolAsync on the legacy stream in the same situation: the same.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 256, default_pool, cudaStreamLegacy), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);

  // Both succeed in relaxed mode, the capture's or the thread's.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 256, default_pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 256, default_pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);

  // Stream-ordered work on the capturing stream: nodes; the free frees nothing.
  ASSERT_EQ(cudaMallocAsync(&p, 100, s), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);
  EXPECT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s, e, cudaEventWaitExternal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);  // invalidates it
  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorCapturedEvent);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 100, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  std::thread([&] {
    cudaGraph_t other = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &other), cudaErrorStreamCaptureWrongThread);
    EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureWrongThread);
  }).join();
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphNode_t nodes[2] = {};
  std::size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  EXPECT_EQ(n, 2u);
  n = 2;
  EXPECT_EQ(cudaGraphGetNodes(g, nodes, &n), cudaSuccess);
  EXPECT_NE(nodes[1], nullptr);
  EXPECT_EQ(cudaGraphGetNodes(g, nodes, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);  // the graph's
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(cudaGraphDestroy(g), cudaErrorInvalidValue);

  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_begun, 5u);
  EXPECT_EQ(c.captures_invalidated, 3u);
  EXPECT_EQ(c.failed_calls, 14u);  // every failing runtime call once
}

TEST_F(CudaDouble, PrimaryContextResetDestroysTheDevicesState)
{
  int const d = devices_ - 1;  // with two devices, device 0 must be left alone
  ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
  CUcontext const ctx = current_context();
  std::size_t const total_free = free_memory();
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, d), cudaSuccess);

  // Something of every kind on device d.
  void* rt = nullptr;
  ASSERT_EQ(cudaMalloc(&rt, 1000), cudaSuccess);
  CUdeviceptr drv = 0, from_default = 0, from_created = 0, captured = 0;
  ASSERT_EQ(cuMemAlloc_v2(&drv, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&from_default, 3 * MiB, nullptr), CUDA_SUCCESS);
  std::uint64_t threshold = 64 * MiB;
  ASSERT_EQ(cuMemPoolSetAttribute(default_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  auto const props = driver_pool_props(d);
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&from_created, 1000, pool, nullptr), CUDA_SUCCESS);
  CUstream s = new_stream(), capturing = new_stream(CU_STREAM_NON_BLOCKING);
  CUevent e = new_event();
  ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&captured, 16, capturing), CUDA_SUCCESS);
  CUstream graph_stream = new_stream();  // a graph made before the reset stays valid
  ASSERT_EQ(cuStreamBeginCapture_v2(graph_stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(graph_stream, &g), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(graph_stream), CUDA_SUCCESS);
  // And something on device 0 when that is another device.
  CUdeviceptr other_device = 0;
  if (d != 0) {
    ASSERT_EQ(cuCtxPushCurrent_v2(primary_context(0)), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc_v2(&other_device, 64), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS);
  }
  int const live_before = cuda_double_live_allocations();

  EXPECT_EQ(cuDevicePrimaryCtxReset_v2(devices_), CUDA_ERROR_INVALID_DEVICE);
  std::thread([d] { EXPECT_EQ(cuDevicePrimaryCtxReset_v2(d), CUDA_SUCCESS); }).join();  // needs no context

  // Every allocation of the device is gone, whatever made it ...
  EXPECT_EQ(cuda_double_live_allocations(), live_before - 5);
  for (CUdeviceptr p : {as_deviceptr(rt), drv, from_default, from_created, captured}) {
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  }
  EXPECT_EQ(cuMemFree_v2(drv), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaFree(rt), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemFreeAsync(from_default, CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_VALUE);
  // ... and so are its created pools, streams, events and captures.
  std::uint64_t value = 0;
  EXPECT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 16, pool, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(capturing), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_ERROR_INVALID_HANDLE);
  // The default pool starts over; all the memory is free.
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0u);
  EXPECT_EQ(free_memory(), total_free);
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, total);
  // The graph stays.
  EXPECT_EQ(graph_node_count(g), 0u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  // The context keeps its handle and is used again at once.
  EXPECT_EQ(current_context(), ctx);
  EXPECT_EQ(primary_context(d), ctx);
  ASSERT_EQ(cuMemAllocAsync(&p, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(p)), default_pool);
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);  // leave device d's pool as found
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  if (d != 0) {
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(other_device)), 3);  // device 0: untouched
    EXPECT_EQ(cuMemFree_v2(other_device), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuda_double_get_counters().primary_context_resets, 1u);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_F(CudaDouble, DeviceResetResetsTheCurrentDevice)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);  // the device is usable again
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::thread([this] {
    // No context current: the runtime device is reset, and nothing made current.
    void* q = nullptr;
    if (devices_ >= 2) {
      ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&q, 64), cudaSuccess);
      ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    }
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(current_context(), nullptr);
    if (q != nullptr) { EXPECT_EQ(cuda_double_pointer_kind(q), 0); }
  }).join();
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.primary_context_resets, 2u);
  EXPECT_EQ(c.failed_calls, 2u);
}

TEST_F(CudaDouble, NewCountersAreResetWithTheOthers)
{
  CUstream s = new_stream();
  CUevent e = new_event();
  EXPECT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, 1u);
  EXPECT_EQ(c.streams_destroyed, 1u);
  EXPECT_EQ(c.events_recorded, 1u);
  EXPECT_EQ(c.stream_waits, 1u);
  EXPECT_EQ(c.stream_synchronizes, 1u);
  EXPECT_EQ(c.context_synchronizes, 1u);
  EXPECT_EQ(c.captures_begun, 1u);
  EXPECT_EQ(c.captures_invalidated, 1u);
  EXPECT_EQ(c.captured_operations, 1u);
  EXPECT_EQ(cuda_double_last_wait_stream(), s);
  cuda_double_reset_counters();
  c = cuda_double_get_counters();
  unsigned long long const* const fields = &c.native_mallocs;
  for (std::size_t i = 0; i < sizeof c / sizeof *fields; ++i) {
    EXPECT_EQ(fields[i], 0u) << "field " << i;
  }
  EXPECT_EQ(cuda_double_last_wait_stream(), CUDA_DOUBLE_NO_STREAM);
}

}  // namespace
