// selftest_driver.cpp: tests of the CUDA TEST DOUBLES (cuda_double.hpp): the
// driver double (libcuda.so.1) and its sharing of the model with the runtime
// double: devices, contexts, memory, pointer attributes, pools, the per-thread
// stream entry points.
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
using byte_literals::PiB;

TEST_F(CudaDouble, DriverIsTheDoubleLoadedWithTheRuntime)
{
  ASSERT_NE(driver_symbol("cuda_double_get_counters"), nullptr) << "libcuda.so.1 is not the driver double";
  EXPECT_EQ(driver_symbol("cuMemAlloc_v2"), reinterpret_cast<void*>(&cuMemAlloc_v2));
  // The runtime has initialized the driver (SetUp called cudaSetDevice).
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  int v = 0;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cuDriverGetVersion(nullptr), CUDA_ERROR_INVALID_VALUE);
  // Handles mean the same in both APIs.
  EXPECT_EQ(CU_STREAM_LEGACY, cudaStreamLegacy);
  EXPECT_EQ(CU_STREAM_PER_THREAD, cudaStreamPerThread);
}

TEST_F(CudaDouble, DriverDeviceQueries)
{
  int n = -1;
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, devices_);
  EXPECT_EQ(cuDeviceGetCount(nullptr), CUDA_ERROR_INVALID_VALUE);
  CUdevice d = -1;
  EXPECT_EQ(cuDeviceGet(&d, devices_ - 1), CUDA_SUCCESS);
  EXPECT_EQ(d, devices_ - 1);
  EXPECT_EQ(cuDeviceGet(&d, devices_), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  int v = -1;
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 9);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 9);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, devices_), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), CUDA_ERROR_INVALID_VALUE);
  char name[64] = {};
  EXPECT_EQ(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "cuda_double device 0 (test double, not a GPU)");
  EXPECT_EQ(cuDeviceGetName(name, 5, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "cuda");
  EXPECT_EQ(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetName(name, sizeof name, devices_), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 8u);
}

TEST_F(CudaDouble, DriverErrorNamesAndStrings)
{
  char const* s = "unchanged";
  EXPECT_EQ(cuGetErrorName(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_SUCCESS");
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_INVALID_CONTEXT, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_INVALID_CONTEXT");
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_STUB_LIBRARY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_UNKNOWN, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "out of memory");
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  s = "unchanged";
  EXPECT_EQ(cuGetErrorString(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(cuGetErrorName(CUDA_SUCCESS, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaDouble, DriverContextStackIsPerThread)
{
  std::thread([this] {
    // A new thread has no current context, so nothing that needs one works.
    EXPECT_EQ(current_context(), nullptr);
    CUdevice d = -1;
    EXPECT_EQ(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    std::size_t free = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    {  // CUDA 13's names its context: none needs to be current.
      CUcontext primary = nullptr;
      ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
      EXPECT_EQ(cuCtxSynchronize_v2(primary), CUDA_SUCCESS);
      EXPECT_EQ(cuCtxSynchronize_v2(reinterpret_cast<CUcontext>(&d)), CUDA_ERROR_INVALID_CONTEXT);
      EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    }
    CUstream s = nullptr;
    EXPECT_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    for (CUstream special : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
      EXPECT_EQ(cuStreamSynchronize(special), CUDA_ERROR_INVALID_CONTEXT);
      EXPECT_EQ(cuMemAllocAsync(&p, 16, special), CUDA_ERROR_INVALID_CONTEXT);
    }
    EXPECT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxPopCurrent_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);  // a no-op on an empty stack
    int rt = -1;
    EXPECT_EQ(cudaGetDevice(&rt), cudaSuccess);  // the runtime device; makes nothing current
    EXPECT_EQ(rt, 0);
    EXPECT_EQ(current_context(), nullptr);

    // Retain + set, as a program using the driver API does.
    CUcontext c0 = nullptr;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
    ASSERT_NE(c0, nullptr);
    CUcontext again = nullptr;
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
    EXPECT_EQ(again, c0);  // one primary context per device
    EXPECT_EQ(cuDevicePrimaryCtxRetain(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&again, devices_), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_EQ(cuCtxSetCurrent(c0), CUDA_SUCCESS);
    EXPECT_EQ(current_context(), c0);
    EXPECT_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT_EQ(d, 0);
    EXPECT_EQ(cuCtxGetDevice(nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuCtxSetCurrent(reinterpret_cast<CUcontext>(&d)), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(current_context(), c0);
    EXPECT_EQ(cuCtxGetCurrent(nullptr), CUDA_ERROR_INVALID_VALUE);

    // Push / pop; cuCtxSetCurrent replaces the top, cuCtxSetCurrent(NULL) pops.
    EXPECT_EQ(cuCtxPushCurrent_v2(c0), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxPushCurrent_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxPushCurrent_v2(reinterpret_cast<CUcontext>(&d)), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext popped = nullptr;
    EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
    EXPECT_EQ(popped, c0);
    EXPECT_EQ(current_context(), c0);  // the one set first is still there
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(current_context(), nullptr);
    EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);

    // Release as often as retained, and no more.
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(devices_), CUDA_ERROR_INVALID_DEVICE);
  }).join();
  // The main thread's context (from SetUp's cudaSetDevice) is untouched.
  EXPECT_EQ(current_context(), primary_context(0));
}

// A made context ends with cuCtxDestroy_v2 (popped when current); a primary
// context and an ended one are no contexts to it.
TEST_F(CudaDouble, DriverMadeContextIsDestroyed)
{
  CUcontext primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(primary), CUDA_SUCCESS);
  CUcontext own = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&own, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_NE(own, primary);
  EXPECT_EQ(current_context(), own);
  EXPECT_EQ(cuCtxDestroy_v2(own), CUDA_SUCCESS);
  EXPECT_EQ(current_context(), primary);
  EXPECT_EQ(cuCtxDestroy_v2(own), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxPushCurrent_v2(own), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize_v2(own), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy_v2(primary), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext popped = nullptr;
  EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

TEST_F(CudaDouble, RuntimeCallsMakeTheRuntimeDevicesContextCurrent)
{
  std::thread([this] {
    EXPECT_EQ(current_context(), nullptr);
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);  // as the real runtime: context first
    EXPECT_EQ(current_context(), primary_context(0));
    CUdevice d = -1;
    EXPECT_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT_EQ(d, 0);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cudaFree(nullptr), cudaSuccess);  // initializes, as natively
    EXPECT_EQ(current_context(), primary_context(0));
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(current_context(), primary_context(0));
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);

    if (devices_ < 2) { return; }
    CUcontext const c0 = primary_context(0), c1 = primary_context(1);
    EXPECT_NE(c0, c1);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(current_context(), c1);
    EXPECT_EQ(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT_EQ(d, 1);
    // cudaGetDevice follows a context the program made current itself ...
    EXPECT_EQ(cuCtxSetCurrent(c0), CUDA_SUCCESS);
    int rt = -1;
    EXPECT_EQ(cudaGetDevice(&rt), cudaSuccess);
    EXPECT_EQ(rt, 0);
    ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);  // ... and so does the runtime's work
    CUdevice owner = -1;
    EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, as_deviceptr(p)), CUDA_SUCCESS);
    EXPECT_EQ(owner, 0);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    // ... and falls back to the runtime device when no context is current.
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cudaGetDevice(&rt), cudaSuccess);
    EXPECT_EQ(rt, 1);
    std::size_t free = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    EXPECT_EQ(current_context(), c1);
    // cudaSetDevice replaces the top of the stack, like cuCtxSetCurrent.
    EXPECT_EQ(cuCtxPushCurrent_v2(c0), CUDA_SUCCESS);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    CUcontext popped = nullptr;
    EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
    EXPECT_EQ(popped, c1);
    EXPECT_EQ(current_context(), c1);
  }).join();
}

TEST_F(CudaDouble, DriverPinnedHostMemory)
{
  std::size_t const free0 = driver_free_memory();
  void* p = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(driver_free_memory(), free0);  // no device's memory
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, as_deviceptr(p)), CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&d, p, 0), CUDA_SUCCESS);
  EXPECT_EQ(as_pointer(d), p);
  EXPECT_EQ(cuMemFree_v2(as_deviceptr(p)), CUDA_ERROR_INVALID_VALUE);  // not cuMemFree's
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_WRITECOMBINED), CUDA_SUCCESS);
  unsigned flags = 0;
  ASSERT_EQ(cuMemHostGetFlags(&flags, p), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_WRITECOMBINED | CU_MEMHOSTALLOC_DEVICEMAP});
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostAlloc(&p, 0, 0), CUDA_ERROR_INVALID_VALUE);
  void* looked_up = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAllocHost", &looked_up, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(looked_up, reinterpret_cast<void*>(&cuMemAllocHost_v2));
}

TEST_F(CudaDouble, DriverPoolInHostMemory)
{
  int supported = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(supported, 1);
  std::size_t const free0 = driver_free_memory();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pool_access(reinterpret_cast<cudaMemPool_t>(pool), 0), 0);  // the host's only, at first
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemPoolSetAccess(pool, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pool_access(reinterpret_cast<cudaMemPool_t>(pool), 0), 3);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 1 * MiB, pool, CU_STREAM_LEGACY), CUDA_SUCCESS);
  static_cast<char*>(as_pointer(p))[0] = 1;  // host memory
  EXPECT_EQ(driver_free_memory(), free0);    // no device's
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
  EXPECT_EQ(cuMemFreeAsync(p, CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // not for host memory
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaDouble, DriverMemAllocAndFree)
{
  std::size_t const free0 = driver_free_memory();
  EXPECT_EQ(free0, free_memory());  // one model
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);  // as documented in cuda.h
  EXPECT_EQ(cuMemAlloc_v2(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAlloc_v2(&p, 1000), CUDA_SUCCESS);
  ASSERT_NE(p, 0u);
  EXPECT_EQ(p % 256, 0u);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 3);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(p)), nullptr);
  EXPECT_EQ(cuda_double_live_allocations(), live_ + 1);
  EXPECT_EQ(driver_free_memory(), free0 - 1000);
  EXPECT_EQ(free_memory(), free0 - 1000);

  EXPECT_EQ(cuMemFree_v2(p + 8), CUDA_ERROR_INVALID_VALUE);  // interior
  int host = 0;
  EXPECT_EQ(cuMemFree_v2(as_deviceptr(&host)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);  // double free
  EXPECT_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  EXPECT_EQ(driver_free_memory(), free0);
  EXPECT_EQ(cuMemAlloc_v2(&p, PiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);  // the driver has no last error
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 8589934592u);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.driver_mallocs, 1u);
  EXPECT_EQ(c.driver_frees, 1u);
  EXPECT_EQ(c.native_mallocs, 0u);
  EXPECT_EQ(c.native_frees, 0u);
  EXPECT_EQ(c.failed_calls, 7u);
}

TEST_F(CudaDouble, MemoryCanBeFreedThroughTheOtherLibrary)
{
  std::size_t const free0 = free_memory();
  void* runtime = nullptr;
  ASSERT_EQ(cudaMalloc(&runtime, 4096), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(runtime), 1);
  CUdeviceptr driver = 0;
  ASSERT_EQ(cuMemAlloc_v2(&driver, 8192), CUDA_SUCCESS);
  EXPECT_EQ(free_memory(), free0 - 4096 - 8192);

  EXPECT_EQ(cuMemFree_v2(as_deviceptr(runtime)), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(runtime), 0);
  EXPECT_EQ(cudaFree(runtime), cudaErrorInvalidValue);  // gone for both
  EXPECT_EQ(cudaFree(as_pointer(driver)), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(driver)), 0);
  EXPECT_EQ(cuMemFree_v2(driver), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(free_memory(), free0);

  // Pool memory, in both directions, and through the plain frees.
  void* a = nullptr;
  ASSERT_EQ(cudaMallocAsync(&a, 100, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cuMemFreeAsync(as_deviceptr(a), CU_STREAM_LEGACY), CUDA_SUCCESS);
  CUdeviceptr b = 0;
  ASSERT_EQ(cuMemAllocAsync(&b, 100, CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(b)), 2);
  EXPECT_EQ(cudaFreeAsync(as_pointer(b), cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cuMemAllocAsync(&b, 100, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cudaFree(as_pointer(b)), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&a, 100, nullptr), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(as_deviceptr(a)), CUDA_SUCCESS);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.native_mallocs, 1u);
  EXPECT_EQ(c.driver_mallocs, 1u);
  EXPECT_EQ(c.native_frees, 2u);  // the cuMemAlloc_v2 pointer and a pool pointer
  EXPECT_EQ(c.driver_frees, 2u);  // the cudaMalloc pointer and a pool pointer
  EXPECT_EQ(c.pool_allocs, 4u);
  EXPECT_EQ(c.pool_frees, 2u);
  EXPECT_EQ(c.failed_calls, 2u);
}

TEST_F(CudaDouble, DriverMemcpyAndMemset)
{
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 64), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(d, 0x5a, 64), CUDA_SUCCESS);
  unsigned char h[64] = {};
  EXPECT_EQ(cuMemcpyDtoH_v2(h, d, 64), CUDA_SUCCESS);
  EXPECT_EQ(h[0], 0x5a);
  EXPECT_EQ(h[63], 0x5a);
  std::memcpy(h, "hello", 6);
  EXPECT_EQ(cuMemcpyHtoD_v2(d + 10, h, 6), CUDA_SUCCESS);
  EXPECT_STREQ(static_cast<char const*>(as_pointer(d + 10)), "hello");
  char back[6] = {};
  EXPECT_EQ(cudaMemcpy(back, as_pointer(d + 10), 6, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_STREQ(back, "hello");

  EXPECT_EQ(cuMemsetD8_v2(d + 60, 0, 5), CUDA_ERROR_INVALID_VALUE);           // runs past the end
  EXPECT_EQ(cuMemsetD8_v2(as_deviceptr(h), 0, 4), CUDA_ERROR_INVALID_VALUE);  // host memory
  EXPECT_EQ(cuMemcpyDtoH_v2(h, d + 32, 33), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(as_deviceptr(h), back, 4), CUDA_ERROR_INVALID_VALUE);  // not device memory
  EXPECT_EQ(cuMemcpyDtoH_v2(nullptr, d, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(d, nullptr, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(0, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

TEST_F(CudaDouble, DriverPointerAttributes)
{
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc_v2(&d, 1000), CUDA_SUCCESS);
  int ordinal = -1;
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d + 999), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 0);
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(std::uintptr_t{1});
  EXPECT_EQ(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, d), CUDA_SUCCESS);
  EXPECT_EQ(pool, nullptr);
  CUdeviceptr start = 0;
  std::size_t size = 0;
  EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 10), CUDA_SUCCESS);
  EXPECT_EQ(start, d);
  EXPECT_EQ(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 10), CUDA_SUCCESS);
  EXPECT_EQ(size, 1000u);
  unsigned type = 0;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_DEVICE});
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d), CUDA_SUCCESS);
  EXPECT_EQ(ctx, primary_context(0));
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d + 1000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_BUFFER_ID, d), CUDA_ERROR_NOT_SUPPORTED);

  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 16, nullptr), cudaSuccess);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_EQ(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, as_deviceptr(p)), CUDA_SUCCESS);
  EXPECT_EQ(pool, default_pool);
  EXPECT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

TEST_F(CudaDouble, DriverPools)
{
  std::size_t const free0 = driver_free_memory();
  CUmemoryPool pool = nullptr;
  auto props = driver_pool_props(0);
  EXPECT_EQ(cuMemPoolCreate(nullptr, &props), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolCreate(&pool, nullptr), CUDA_ERROR_INVALID_VALUE);
  props.location.id = devices_;
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
  props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_WIN32);
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
  props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUstream bad = nullptr;
  EXPECT_EQ(cuStreamCreate(&bad, 0x10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, 1000, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 2);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(a)), pool);
  EXPECT_EQ(cuda_double_last_alloc_stream(), s);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * MiB);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 1000u);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 1000u);  // the same pool for the runtime
  EXPECT_EQ(driver_free_memory(), free0 - 2 * MiB);
  CUmemoryPool owner = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a), CUDA_SUCCESS);
  EXPECT_EQ(owner, pool);

  // The runtime allocates from a pool the driver made, and the reverse.
  void* b = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&b, 3 * MiB, pool, s), cudaSuccess);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 4 * MiB);

  auto const bogus_stream = reinterpret_cast<CUstream>(std::uintptr_t{0x1234});
  auto const bogus_pool = reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x1234});
  CUdeviceptr c = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&c, 16, bogus_pool, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&c, 16, pool, bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemAllocFromPoolAsync(nullptr, 16, pool, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&c, PiB, pool, s), CUDA_ERROR_OUT_OF_MEMORY);
  c = 1;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&c, 0, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(c, 0u);

  EXPECT_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_free_stream(), s);
  EXPECT_EQ(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(0, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(as_deviceptr(b), bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemFreeAsync(as_deviceptr(b), s), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 4 * MiB);  // kept until a sync

  // Attributes, shared with the runtime's view of the pool.
  std::uint64_t threshold = 2 * MiB;
  EXPECT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReleaseThreshold), 2 * MiB);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * MiB);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 4 * MiB);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 3 * MiB + 1000);
  std::uint64_t zero = 0, one = 1;
  EXPECT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0u);
  EXPECT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAttribute(bogus_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &one), CUDA_ERROR_INVALID_VALUE);
  int reuse = -1;
  EXPECT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse), CUDA_SUCCESS);
  EXPECT_EQ(reuse, 1);
  threshold = 0;
  EXPECT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);  // trims the current context's device
  EXPECT_EQ(driver_pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(driver_free_memory(), free0);

  // Destroying frees what is left; default pools cannot be destroyed.
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, 64, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 0);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_EQ(cuMemPoolDestroy(default_pool), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  for (CUstream special : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    EXPECT_EQ(cuStreamDestroy_v2(special), CUDA_ERROR_INVALID_HANDLE);
  }
  EXPECT_EQ(driver_free_memory(), free0);

  auto const counters = cuda_double_get_counters();
  EXPECT_EQ(counters.pools_created, 1u);
  EXPECT_EQ(counters.pools_destroyed, 1u);
  EXPECT_EQ(counters.pool_allocs, 3u);
  EXPECT_EQ(counters.pool_frees, 2u);
}

TEST_F(CudaDouble, DriverMallocAsyncUsesTheStreamsDevicesDefaultPool)
{
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 100, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(p)), default_pool);
  EXPECT_EQ(cuda_double_last_alloc_stream(), nullptr);
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_free_stream(), nullptr);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  if (devices_ < 2) { return; }
  // A stream created in device 1's context: its allocations go to device 1's
  // default pool whatever context is current, and no context is needed.
  ASSERT_EQ(cuCtxSetCurrent(primary_context(1)), CUDA_SUCCESS);
  CUstream s1 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
  cudaMemPool_t default1 = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default1, 1), cudaSuccess);
  std::thread([&] {
    CUdeviceptr q = 0;
    ASSERT_EQ(cuMemAllocAsync(&q, 16, s1), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_pool(as_pointer(q)), default1);
    int ordinal = -1;
    EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, q), CUDA_SUCCESS);
    EXPECT_EQ(ordinal, 1);
    EXPECT_EQ(cuMemFreeAsync(q, s1), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(s1), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  }).join();
}

TEST_F(CudaDouble, DriverPerThreadStreamEntryPoints)
{
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  // The null stream is the per-thread stream for the _ptsz entry points ...
  ASSERT_EQ(cuMemAllocAsync_ptsz(&p, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_alloc_stream(), CU_STREAM_PER_THREAD);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(p)), default_pool);
  ASSERT_EQ(cuMemFreeAsync_ptsz(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_free_stream(), CU_STREAM_PER_THREAD);
  ASSERT_EQ(cuMemAllocFromPoolAsync_ptsz(&p, 16, default_pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_alloc_stream(), CU_STREAM_PER_THREAD);
  EXPECT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_SUCCESS);
  // ... and any other stream is itself.
  ASSERT_EQ(cuMemFreeAsync_ptsz(p, CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_free_stream(), CU_STREAM_LEGACY);
  ASSERT_EQ(cuMemAllocAsync_ptsz(&p, 16, s), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_alloc_stream(), s);
  ASSERT_EQ(cuMemFreeAsync_ptsz(p, s), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_free_stream(), s);
  EXPECT_EQ(cuStreamSynchronize_ptsz(s), CUDA_SUCCESS);
  // The plain ones keep the null stream.
  ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 16, default_pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_alloc_stream(), nullptr);
  ASSERT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_free_stream(), nullptr);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_allocs, 4u);
  EXPECT_EQ(c.pool_frees, 4u);
  EXPECT_EQ(c.failed_calls, 0u);
}

}  // namespace
