// Pinned host memory with libasyncshim.so preloaded and ASYNCSHIM_HOST_POOL=1:
// served from the host pool through every way a program reaches the calls,
// and what the pool does not serve left to the native call. (That the results
// equal the native calls' is shim.same_as_native.host*; the ordering of the
// frees, simulation.pinned.)
#include "cuda_double.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

namespace {

using namespace shim_test;

using ShimHostPool = ShimTest;

TEST_F(ShimHostPool, EachEntryPointIsServedByThePool)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);  // a context current, for the driver calls
  auto const before = cuda_double_get_counters();
  void* blocks[4] = {};
  ASSERT_EQ(cudaMallocHost(&blocks[0], 4096), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&blocks[1], 100000, cudaHostAllocPortable | cudaHostAllocMapped), cudaSuccess);
  ASSERT_EQ(cuMemAllocHost_v2(&blocks[2], 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&blocks[3], 1 << 20, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  for (void* p : blocks) {
    EXPECT_EQ(cuda_double_pointer_kind(p), pool);
    void* device = nullptr;
    EXPECT_EQ(cudaHostGetDevicePointer(&device, p, 0), cudaSuccess);
    EXPECT_EQ(device, p);
  }
  unsigned flags = 0;
  EXPECT_EQ(cudaHostGetFlags(&flags, blocks[3]), cudaSuccess);
  EXPECT_EQ(flags, unsigned{cudaHostAllocPortable | cudaHostAllocMapped});
  EXPECT_EQ(cudaFreeHost(blocks[0]), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(blocks[1]), cudaSuccess);
  EXPECT_EQ(cuMemFreeHost(blocks[2]), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(blocks[3]), CUDA_SUCCESS);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.host_mallocs, before.host_mallocs);  // none natively
  EXPECT_EQ(after.host_frees, before.host_frees);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

TEST_F(ShimHostPool, LookedUpEntryPointsAreTheShims)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);

  // dlsym, as a framework that loads the runtime itself does.
  using malloc_host_fn = cudaError_t (*)(void**, std::size_t);
  using free_host_fn = cudaError_t (*)(void*);
  auto const malloc_host = reinterpret_cast<malloc_host_fn>(dlsym(RTLD_DEFAULT, "cudaMallocHost"));
  auto const free_host = reinterpret_cast<free_host_fn>(dlsym(RTLD_DEFAULT, "cudaFreeHost"));
  ASSERT_NE(malloc_host, nullptr);
  ASSERT_NE(free_host, nullptr);
  void* p = nullptr;
  ASSERT_EQ(malloc_host(&p, 777), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(free_host(p), cudaSuccess);

  // cuGetProcAddress from the driver library opened by path, as a statically
  // linked runtime reaches the driver's pinned-memory calls.
  void* const driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(driver, nullptr) << dlerror();
  using get_proc_address_fn = CUresult (*)(char const*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto const get = reinterpret_cast<get_proc_address_fn>(dlsym(driver, "cuGetProcAddress_v2"));
  ASSERT_NE(get, nullptr);
  auto const lookup = [&](char const* name) {
    void* found = nullptr;
    CUdriverProcAddressQueryResult status{};
    EXPECT_EQ(get(name, &found, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS) << name;
    return found;
  };
  auto const alloc_host = reinterpret_cast<CUresult (*)(void**, std::size_t)>(lookup("cuMemAllocHost"));
  auto const host_alloc = reinterpret_cast<CUresult (*)(void**, std::size_t, unsigned)>(lookup("cuMemHostAlloc"));
  auto const device_pointer =
    reinterpret_cast<CUresult (*)(CUdeviceptr*, void*, unsigned)>(lookup("cuMemHostGetDevicePointer"));
  auto const get_flags = reinterpret_cast<CUresult (*)(unsigned*, void*)>(lookup("cuMemHostGetFlags"));
  auto const mem_free_host = reinterpret_cast<CUresult (*)(void*)>(lookup("cuMemFreeHost"));
  ASSERT_TRUE(alloc_host != nullptr && host_alloc != nullptr && device_pointer != nullptr && get_flags != nullptr &&
              mem_free_host != nullptr);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(alloc_host(&a, 5000), CUDA_SUCCESS);
  ASSERT_EQ(host_alloc(&b, 5000, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(a), pool);
  EXPECT_EQ(cuda_double_pointer_kind(b), pool);
  CUdeviceptr d = 0;
  EXPECT_EQ(device_pointer(&d, static_cast<char*>(b) + 100, 0), CUDA_SUCCESS);  // an address inside the block
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(b) + 100);
  unsigned flags = 0;
  EXPECT_EQ(get_flags(&flags, a), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_DEVICEMAP});
  EXPECT_EQ(mem_free_host(a), CUDA_SUCCESS);
  EXPECT_EQ(mem_free_host(b), CUDA_SUCCESS);
  dlclose(driver);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

TEST_F(ShimHostPool, AFreeDuringACaptureLeavesTheCaptureAlone)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMallocHost(&p, 4096), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4096), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, p, 4096, cudaMemcpyHostToDevice, stream), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(p), cudaSuccess);            // no wait for the devices now: it would end the capture
  EXPECT_EQ(cudaFreeHost(p), cudaErrorInvalidValue);  // freed already
  (void)cudaGetLastError();
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  if (graph != nullptr) { EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess); }
  void* again = nullptr;  // no capture now: the block goes back first
  ASSERT_EQ(cudaMallocHost(&again, 4096), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(again), pool);
  EXPECT_EQ(cudaFreeHost(again), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(ShimHostPool, AFreeAGlobalCaptureForbidsFailsAsNatively)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMallocHost(&p, 4096), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(p), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);  // ended, as natively
  (void)cudaGetLastError();
  void* device = nullptr;
  EXPECT_EQ(cudaHostGetDevicePointer(&device, p, 0), cudaSuccess);  // still the program's
  EXPECT_EQ(cudaFreeHost(p), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(ShimHostPool, WhatThePoolDoesNotServeTheNativeCallAnswers)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);
  auto const before = cuda_double_get_counters();
  void* write_combined = nullptr;
  ASSERT_EQ(cudaHostAlloc(&write_combined, 4096, cudaHostAllocWriteCombined), cudaSuccess);
  EXPECT_NE(cuda_double_pointer_kind(write_combined), pool);
  void* driver_write_combined = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&driver_write_combined, 4096, CU_MEMHOSTALLOC_WRITECOMBINED), CUDA_SUCCESS);
  EXPECT_NE(cuda_double_pointer_kind(driver_write_combined), pool);
  void* p = nullptr;
  EXPECT_EQ(cudaHostAlloc(&p, 64, 0x100), cudaErrorInvalidValue);  // not a flag
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(write_combined), cudaSuccess);
  EXPECT_EQ(cuMemFreeHost(driver_write_combined), CUDA_SUCCESS);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.host_mallocs, before.host_mallocs + 2);
  EXPECT_EQ(after.host_frees, before.host_frees + 2);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

}  // namespace
