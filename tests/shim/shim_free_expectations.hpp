// What the tests of frees expect a cudaFree to do (queued or in order),
// and work put on a stream, shared by the shim's test files.
#pragma once

#include "cuda_double.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace shim_test {

// A cudaFree of a new 1000-byte block `p` that must be queued, not made in
// the legacy stream's order (the pool keeps the block until the queue is
// issued); `before`: the counters just before the free.
inline void free_expecting_queued(void*& p, cuda_double_counters& before)
{
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);  // queued
}

// The same for a free that must go to the pool at once on the legacy
// stream; `before` and `after`: the counters around the free.
inline void free_expecting_in_order(void*& p, cuda_double_counters& before, cuda_double_counters& after)
{
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  after = cuda_double_get_counters();
  EXPECT_EQ(after.free_async_legacy_stream, before.free_async_legacy_stream + 1);
}
// Work on `stream` through the driver's kernel launch (the shim's export;
// the double runs nothing).
inline void launch_on(cudaStream_t stream)
{
  ASSERT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(stream), nullptr, nullptr),
            CUDA_SUCCESS);
}

}  // namespace shim_test
