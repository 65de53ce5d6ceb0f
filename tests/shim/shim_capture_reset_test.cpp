// Stream capture and device reset, with libasyncshim.so preloaded into a
// program linked against the CUDA test double. The shim reads its settings once
// per process, so each suite runs in an environment of its own, stated in
// tests/shim/CMakeLists.txt (shim_case) and checked at the start of each test
// (suite_environment.hpp).
#include "cuda_double.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

// Threads that allocate and free without pause hold the tracker's capture
// lock shared, one after the other; a capture's beginning, which takes it
// exclusively, holds new ones back and gets in.
TEST_F(ShimCapture, ACaptureBeginsWhileThreadsAllocateWithoutPause)
{
  std::atomic<bool> stop{false};
  std::atomic<long> pairs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        void* p = nullptr;
        if (cudaMalloc(&p, 4096) == cudaSuccess) { (void)cudaFree(p); }
        pairs.fetch_add(1);
      }
    });
  }
  while (pairs.load() < 1000) {
    std::this_thread::yield();
  }
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto const start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop = true;
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_LT(seconds, 10.0) << "20 captures began and ended while 4 threads allocated";
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

}  // namespace
