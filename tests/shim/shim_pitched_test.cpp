// Pitched allocations (cudaMallocPitch, cudaMalloc3D, cuMemAllocPitch_v2) with
// libasyncshim.so preloaded: served from the pool with the double's native
// pitch, through every way a program reaches them, and freed in order like any
// block. (That the results equal the native calls' is
// shim.same_as_native.pitched*; the statistics, shim.pitched_statistics.)
#include "cuda_double.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <driver_functions.h>  // make_cudaExtent
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

using namespace shim_test;

using ShimPitched = ShimTest;

std::size_t double_pitch(std::size_t width)
{
  int alignment = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&alignment, cudaDevAttrTextureAlignment, 0), cudaSuccess);
  auto const a = static_cast<std::size_t>(alignment);
  return (width + a - 1) / a * a;
}

TEST_F(ShimPitched, EachEntryPointIsServedByThePoolWithTheNativePitch)
{
  auto const before = cuda_double_get_counters();
  void* p = nullptr;
  std::size_t pitch = 0;
  ASSERT_EQ(cudaMallocPitch(&p, &pitch, 1000, 7), cudaSuccess);
  EXPECT_EQ(pitch, double_pitch(1000));
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamLegacy);

  cudaPitchedPtr volume{};
  ASSERT_EQ(cudaMalloc3D(&volume, make_cudaExtent(100, 3, 5)), cudaSuccess);
  EXPECT_EQ(volume.pitch, double_pitch(100));
  EXPECT_EQ(volume.xsize, 100U);
  EXPECT_EQ(volume.ysize, 3U);
  EXPECT_EQ(cuda_double_pointer_kind(volume.ptr), pool);

  CUdeviceptr d = 0;
  std::size_t driver_pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&d, &driver_pitch, 3000, 2, 16), CUDA_SUCCESS);
  EXPECT_EQ(driver_pitch, double_pitch(3000));
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(d)), pool);

  EXPECT_EQ(cuda_double_get_counters().pitched_mallocs, before.pitched_mallocs);  // none natively
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(volume.ptr), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

// What a free did: the double's counters that tell the free paths apart.
struct free_path {
  unsigned long long pool_frees, legacy, non_blocking, events, stream_syncs, context_syncs;
  bool operator==(free_path const& o) const
  {
    return pool_frees == o.pool_frees && legacy == o.legacy && non_blocking == o.non_blocking && events == o.events &&
           stream_syncs == o.stream_syncs && context_syncs == o.context_syncs;
  }
};

free_path path_of_free(void* p)
{
  auto const b = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // a double free, as natively
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  auto const a = cuda_double_get_counters();
  return {a.pool_frees - b.pool_frees,
          a.free_async_legacy_stream - b.free_async_legacy_stream,
          a.free_async_non_blocking_stream - b.free_async_non_blocking_stream,
          a.events_recorded - b.events_recorded,
          a.stream_synchronizes - b.stream_synchronizes,
          a.context_synchronizes - b.context_synchronizes};
}

TEST_F(ShimPitched, AFreedPitchedBlockTakesThePathOfAnyBlockOfItsSize)
{
  void* p = nullptr;
  std::size_t pitch = 0;
  ASSERT_EQ(cudaMallocPitch(&p, &pitch, 640, 480), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);
  void* plain = nullptr;
  ASSERT_EQ(cudaMalloc(&plain, pitch * 480), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(plain), pool);
  free_path const pitched_path = path_of_free(p);
  free_path const plain_path = path_of_free(plain);
  EXPECT_EQ(pitched_path.pool_frees, 1U);
  EXPECT_TRUE(pitched_path == plain_path);
}

TEST_F(ShimPitched, LookedUpEntryPointsAreTheShims)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);  // a context current, for the driver calls

  // dlsym, as a framework that loads the runtime itself does.
  using malloc_pitch_fn = cudaError_t (*)(void**, std::size_t*, std::size_t, std::size_t);
  auto const by_dlsym = reinterpret_cast<malloc_pitch_fn>(dlsym(RTLD_DEFAULT, "cudaMallocPitch"));
  ASSERT_NE(by_dlsym, nullptr);
  void* p = nullptr;
  std::size_t pitch = 0;
  ASSERT_EQ(by_dlsym(&p, &pitch, 77, 2), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(pitch, double_pitch(77));
  EXPECT_EQ(cudaFree(p), cudaSuccess);

  // cuGetProcAddress from the driver library opened by path, as a statically
  // linked runtime reaches cuMemAllocPitch.
  void* const driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(driver, nullptr) << dlerror();
  using get_proc_address_fn = CUresult (*)(char const*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto const get = reinterpret_cast<get_proc_address_fn>(dlsym(driver, "cuGetProcAddress_v2"));
  ASSERT_NE(get, nullptr);
  void* found = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(get("cuMemAllocPitch", &found, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  ASSERT_NE(found, nullptr);
  using mem_alloc_pitch_fn = CUresult (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned);
  CUdeviceptr d = 0;
  ASSERT_EQ(reinterpret_cast<mem_alloc_pitch_fn>(found)(&d, &pitch, 5000, 3, 4), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(d)), pool);
  EXPECT_EQ(pitch, double_pitch(5000));
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  dlclose(driver);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

TEST_F(ShimPitched, WhatTheShimLeavesAloneTheNativeCallAnswers)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);
  auto const before = cuda_double_get_counters();
  CUdeviceptr d = 0;
  std::size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch_v2(&d, &pitch, 64, 2, 2), CUDA_ERROR_INVALID_VALUE);  // element size 2
  void* p = nullptr;
  EXPECT_EQ(cudaMallocPitch(&p, &pitch, std::size_t{1} << 31, 1), cudaErrorInvalidValue);  // beyond the largest pitch
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  // Both reached the double (a failed call is counted there).
  EXPECT_EQ(cuda_double_get_counters().failed_calls, before.failed_calls + 2);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

// ---- ShimPitchedTextureAlignment: a texture alignment (4096) above the
// blocks' own (512): the pool's blocks mostly cannot serve a pitched request

using ShimPitchedTextureAlignment = ShimTest;

TEST_F(ShimPitchedTextureAlignment, EveryPitchedBaseIsAlignedAsTexturesNeedEvenWhereThePoolsBlockIsNot)
{
  int alignment = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&alignment, cudaDevAttrTextureAlignment, 0), cudaSuccess);
  ASSERT_EQ(alignment, 4096);
  int from_pool = 0;
  int native = 0;
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* neighbour = nullptr;  // a small block between pitched ones
    ASSERT_EQ(cudaMalloc(&neighbour, 256), cudaSuccess);
    blocks.push_back(neighbour);
    void* p = nullptr;
    std::size_t pitch = 0;
    ASSERT_EQ(cudaMallocPitch(&p, &pitch, 100, 2), cudaSuccess);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0U) << p;
    EXPECT_EQ(pitch, 4096U);
    (cuda_double_pointer_kind(p) == pool ? from_pool : native) += 1;
    blocks.push_back(p);
  }
  EXPECT_GT(native, 0) << "the pool's blocks happened to be aligned: the fallback was not exercised";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the fallback leaves no error behind
  for (void* p : blocks) {
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  }
  std::printf("pitched blocks: %d from the pool, %d native\n", from_pool, native);
}

}  // namespace
