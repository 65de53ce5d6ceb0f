// selftest_runtime.cpp: tests of the CUDA TEST DOUBLES (cuda_double.hpp): the
// runtime double on its own: versions, errors, devices, memory, copies,
// streams, pools and their accounting, many threads, the counters.
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

TEST_F(CudaDouble, Versions)
{
  int v = 0;
  EXPECT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cudaRuntimeGetVersion(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDriverGetVersion(nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, ErrorNamesAndStrings)
{
  EXPECT_STREQ(cudaGetErrorName(cudaSuccess), "cudaSuccess");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInsufficientDriver), "cudaErrorInsufficientDriver");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNoDevice), "cudaErrorNoDevice");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidDevice), "cudaErrorInvalidDevice");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidResourceHandle), "cudaErrorInvalidResourceHandle");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNotSupported), "cudaErrorNotSupported");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidMemcpyDirection), "cudaErrorInvalidMemcpyDirection");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorUnknown), "cudaErrorUnknown");
  EXPECT_STREQ(cudaGetErrorName(static_cast<cudaError_t>(12345)), "unrecognized error code");
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorIllegalAddress), "cudaErrorIllegalAddress");
  EXPECT_STRNE(cudaGetErrorString(static_cast<cudaError_t>(12345)), "");
}

TEST_F(CudaDouble, LastErrorIsPerThreadAndKeptUntilRead)
{
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(4096), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  int v = 0;
  EXPECT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);  // success leaves it alone
  std::thread([] {
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    int host = 0;
    EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  }).join();
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 2u);
}

TEST_F(CudaDouble, CurrentDeviceIsPerThread)
{
  int d = -1;
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 0);
  EXPECT_EQ(cudaGetDevice(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(devices_), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetDeviceCount(nullptr), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  if (devices_ < 2) { GTEST_SKIP() << "one device"; }
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 1);
  std::thread([] {
    int other = -1;
    EXPECT_EQ(cudaGetDevice(&other), cudaSuccess);
    EXPECT_EQ(other, 0);
  }).join();
}

TEST_F(CudaDouble, DeviceAttributes)
{
  int v = -1;
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  EXPECT_EQ(v, 9);
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 0), cudaSuccess);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, 0), cudaSuccess);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, devices_), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceGetAttribute(nullptr, cudaDevAttrMemoryPoolsSupported, 0), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, MallocAndFree)
{
  std::size_t const free0 = free_memory();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(cuda_double_pointer_kind(p), 1);
  EXPECT_EQ(cuda_double_pointer_pool(p), nullptr);
  EXPECT_EQ(cuda_double_live_allocations(), live_ + 1);
  EXPECT_EQ(free_memory(), free0 - 1000);

  EXPECT_EQ(cudaFree(static_cast<char*>(p) + 8), cudaErrorInvalidValue);  // interior
  int host = 0;
  EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // double free
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(free_memory(), free0);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);

  p = &host;
  EXPECT_EQ(cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMalloc(&p, PiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(free_memory(), free0);

  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, 8589934592u);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.native_mallocs, 1u);
  EXPECT_EQ(c.native_frees, 1u);
  EXPECT_EQ(c.failed_calls, 6u);
}

TEST_F(CudaDouble, MemcpyAndMemset)
{
  char* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64), cudaSuccess);
  EXPECT_EQ(cudaMemset(d, 0x5a, 64), cudaSuccess);
  char h[64] = {};
  EXPECT_EQ(cudaMemcpy(h, d, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 0x5a);
  EXPECT_EQ(h[63], 0x5a);
  std::strcpy(h, "hello");
  EXPECT_EQ(cudaMemcpy(d + 10, h, 6, cudaMemcpyDefault), cudaSuccess);
  EXPECT_STREQ(d + 10, "hello");

  EXPECT_EQ(cudaMemset(d + 60, 0, 5), cudaErrorInvalidValue);  // runs past the end
  EXPECT_EQ(cudaMemset(h, 0, 4), cudaErrorInvalidValue);       // host memory
  EXPECT_EQ(cudaMemcpy(h, d + 32, 33, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h, d, 4, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(nullptr, d, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(nullptr, nullptr, 0, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemset(nullptr, 0, 0), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(CudaDouble, PointerAttributes)
{
  char* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64), cudaSuccess);
  cudaPointerAttributes a{};
  // Device memory, also inside the allocation.
  for (char* p : {d, d + 63}) {
    a = cudaPointerAttributes{};
    EXPECT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    EXPECT_EQ(a.device, 0);
    EXPECT_EQ(a.devicePointer, p);
    EXPECT_EQ(a.hostPointer, nullptr);
  }
  // Memory the double does not know: unregistered host memory (CUDA 11 on).
  int host = 0;
  for (void const* p : {static_cast<void const*>(&host), static_cast<void const*>(d + 64)}) {
    EXPECT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
    EXPECT_EQ(a.device, cudaInvalidDeviceId);
    EXPECT_EQ(a.devicePointer, nullptr);
    EXPECT_EQ(a.hostPointer, p);
  }
  EXPECT_EQ(cudaPointerGetAttributes(nullptr, d), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  if (devices_ >= 2) {
    // The device where the memory lives, not the current one.
    char* d1 = nullptr;
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d1), 64), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaPointerGetAttributes(&a, d1), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    EXPECT_EQ(a.device, 1);
    EXPECT_EQ(cudaFree(d1), cudaSuccess);
  }
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 1u);
}

TEST_F(CudaDouble, Streams)
{
  cudaStream_t s = nullptr, nb = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_NE(s, nullptr);
  EXPECT_NE(s, nb);
  cudaStream_t bad = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&bad, 0x10), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamCreate(nullptr), cudaErrorInvalidValue);
  for (cudaStream_t ok : {cudaStream_t{}, cudaStreamLegacy, cudaStreamPerThread, s, nb}) {
    EXPECT_EQ(cudaStreamSynchronize(ok), cudaSuccess);
  }
  auto const bogus = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1234});
  EXPECT_EQ(cudaStreamSynchronize(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nb), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaDouble, PoolCreateValidatesProperties)
{
  cudaMemPool_t pool = nullptr;
  auto props = device_pool_props(0);
  EXPECT_EQ(cudaMemPoolCreate(nullptr, &props), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolCreate(&pool, nullptr), cudaErrorInvalidValue);
  props.allocType = cudaMemAllocationTypeInvalid;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props = device_pool_props(devices_);
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props = device_pool_props(0, cudaMemHandleTypePosixFileDescriptor);
  props.location.type = cudaMemLocationTypeHost;  // a pool in host memory: no handle types
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props.location.type = cudaMemLocationTypeHostNuma;  // not modelled
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props = device_pool_props(0, cudaMemHandleTypeWin32);
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorNotSupported);

  for (auto handles :
       {cudaMemHandleTypeNone, cudaMemHandleTypePosixFileDescriptor,
        static_cast<cudaMemAllocationHandleType>(cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric)}) {
    props = device_pool_props(0, handles);
    ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
    EXPECT_NE(pool, nullptr);
    EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
    EXPECT_EQ(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
  }
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(default_pool), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolDestroy(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, devices_), cudaErrorInvalidDevice);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pools_created, 3u);
  EXPECT_EQ(c.pools_destroyed, 3u);
}

TEST_F(CudaDouble, PoolAccounting)
{
  std::size_t const free0 = free_memory();
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cuda_double_last_free_stream(), CUDA_DOUBLE_NO_STREAM);

  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&a, 1000, pool, s1), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(cuda_double_pointer_kind(a), 2);
  EXPECT_EQ(cuda_double_pointer_pool(a), pool);
  EXPECT_EQ(cuda_double_last_alloc_stream(), s1);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 1000u);
  EXPECT_EQ(free_memory(), free0 - 2 * MiB);

  ASSERT_EQ(cudaMallocFromPoolAsync(&b, 3 * MiB, pool, cudaStreamPerThread), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamPerThread);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 4 * MiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * MiB + 1000);
  EXPECT_EQ(free_memory(), free0 - 4 * MiB);

  EXPECT_EQ(cudaFreeAsync(a, s2), cudaSuccess);
  EXPECT_EQ(cuda_double_last_free_stream(), s2);
  EXPECT_EQ(cudaFreeAsync(a, s2), cudaErrorInvalidValue);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * MiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 4 * MiB);  // kept until a sync
  EXPECT_EQ(cudaFree(b), cudaSuccess);  // cudaFree of a pool pointer returns it to its pool
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemHigh), 3 * MiB + 1000);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemHigh), 4 * MiB);
  EXPECT_EQ(free_memory(), free0 - 4 * MiB);
  EXPECT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(free_memory(), free0);

  // A release threshold keeps memory reserved across synchronizations.
  std::uint64_t threshold = 8 * MiB;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReleaseThreshold), 8 * MiB);
  ASSERT_EQ(cudaMallocFromPoolAsync(&a, 5 * MiB, pool, s1), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(a, s1), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 6 * MiB);
  threshold = MiB;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), MiB);

  // High watermarks reset to the current values; only 0 may be set.
  std::uint64_t zero = 0, one = 1;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemHigh), MiB);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemHigh), 0u);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &one), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &zero), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolGetAttribute(nullptr, cudaMemPoolAttrReleaseThreshold, &one), cudaErrorInvalidValue);

  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(free_memory(), free0);
  EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_allocs, 3u);
  EXPECT_EQ(c.pool_frees, 2u);  // the cudaFree of b counts as a native free
  EXPECT_EQ(c.native_frees, 1u);
  EXPECT_EQ(c.native_mallocs, 0u);
}

TEST_F(CudaDouble, PoolCallErrors)
{
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto const bogus_stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1234});
  auto const bogus_pool = reinterpret_cast<cudaMemPool_t>(std::uintptr_t{0x1234});

  void* p = &p;
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 0, pool, s), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cuda_double_last_alloc_stream(), s);
  EXPECT_EQ(cudaMallocFromPoolAsync(nullptr, 16, pool, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 16, bogus_pool, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 16, pool, bogus_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, PiB, pool, s), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMallocAsync(&p, PiB, s), cudaErrorMemoryAllocation);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);

  void* native = nullptr;
  ASSERT_EQ(cudaMalloc(&native, 64), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(native, s), cudaErrorInvalidValue);  // not from a pool
  EXPECT_EQ(cuda_double_pointer_kind(native), 1);
  EXPECT_EQ(cudaFreeAsync(nullptr, s), cudaErrorInvalidValue);
  int host = 0;
  EXPECT_EQ(cudaFreeAsync(&host, s), cudaErrorInvalidValue);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 64, pool, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, bogus_stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaFreeAsync(static_cast<char*>(p) + 1, s), cudaErrorInvalidValue);
  EXPECT_EQ(cuda_double_last_free_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cuda_double_last_free_stream(), nullptr);
  EXPECT_EQ(cudaFree(native), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(CudaDouble, MallocAsyncUsesTheDefaultPool)
{
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  ASSERT_NE(default_pool, nullptr);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 100, nullptr), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);
  EXPECT_EQ(cuda_double_pointer_pool(p), default_pool);
  EXPECT_EQ(pool_attr(default_pool, cudaMemPoolAttrUsedMemCurrent), 100u);
  EXPECT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(pool_attr(default_pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(cuda_double_get_counters().pool_allocs, 1u);
  EXPECT_EQ(cuda_double_get_counters().pool_frees, 1u);
}

TEST_F(CudaDouble, DestroyingAPoolFreesItsAllocations)
{
  std::size_t const free0 = free_memory();
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* p[3] = {};
  for (auto& q : p) {
    ASSERT_EQ(cudaMallocFromPoolAsync(&q, MiB, pool, nullptr), cudaSuccess);
  }
  EXPECT_EQ(cuda_double_live_allocations(), live_ + 3);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cuda_double_live_allocations(), live_);
  EXPECT_EQ(free_memory(), free0);
  EXPECT_EQ(cuda_double_pointer_kind(p[0]), 0);
  EXPECT_EQ(cudaFree(p[0]), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeAsync(p[1], nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p[0], 16, pool, nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, SynchronizationTrimsOnlyThatDevicesPools)
{
  if (devices_ < 2) { GTEST_SKIP() << "one device"; }
  cudaMemPool_t pool1 = nullptr;
  auto const props = device_pool_props(1);
  ASSERT_EQ(cudaMemPoolCreate(&pool1, &props), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1000, pool1, nullptr), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  std::size_t const free0 = free_memory();  // device 0 is unaffected
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(pool_attr(pool1, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);

  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(free_memory(), free0 - 2 * MiB);
  cudaStream_t s1 = nullptr;  // belongs to device 1
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);

  // cudaMallocAsync on a device-1 stream takes device 1's default pool.
  cudaMemPool_t default1 = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default1, 1), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 16, s1), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_pool(p), default1);
  ASSERT_EQ(cudaFreeAsync(p, s1), cudaSuccess);

  EXPECT_EQ(cudaStreamSynchronize(s1), cudaSuccess);  // a device-1 synchronization
  EXPECT_EQ(pool_attr(pool1, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(pool_attr(default1, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool1), cudaSuccess);
}

TEST_F(CudaDouble, ManyThreads)
{
  constexpr int thread_count = 8;
  constexpr int iterations = 2000;
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([pool, t] {
      cudaStream_t s = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      for (int i = 0; i < iterations; ++i) {
        void* a = nullptr;
        void* b = nullptr;
        std::size_t const size = 1 + static_cast<std::size_t>((i * 7919 + t) % 100000);
        ASSERT_EQ(cudaMalloc(&a, size), cudaSuccess);
        ASSERT_EQ(cudaMallocFromPoolAsync(&b, size, pool, s), cudaSuccess);
        ASSERT_EQ(cudaMemset(b, t, size), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(a, b, size, cudaMemcpyDeviceToDevice), cudaSuccess);
        ASSERT_EQ(static_cast<unsigned char*>(a)[size - 1], t);
        ASSERT_EQ(cudaFreeAsync(b, s), cudaSuccess);
        ASSERT_EQ(cudaFree(a), cudaSuccess);
        if (i % 100 == 0) { ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess); }
      }
      ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.native_mallocs, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.native_frees, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.pool_allocs, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.pool_frees, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.failed_calls, 0u);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(CudaDouble, PitchedAllocationsRoundRowsUpToTheTextureAlignment)
{
  int alignment = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&alignment, cudaDevAttrTextureAlignment, 0), cudaSuccess);
  ASSERT_EQ(alignment, 512);
  auto const before = cuda_double_get_counters();
  void* p = nullptr;
  std::size_t pitch = 0;
  ASSERT_EQ(cudaMallocPitch(&p, &pitch, 513, 3), cudaSuccess);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(cuda_double_pointer_kind(p), 1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  cudaPitchedPtr volume{};
  cudaExtent extent{};
  extent.width = 100;
  extent.height = 2;
  extent.depth = 3;
  ASSERT_EQ(cudaMalloc3D(&volume, extent), cudaSuccess);
  EXPECT_EQ(volume.pitch, 512u);
  EXPECT_EQ(volume.xsize, 100u);
  EXPECT_EQ(volume.ysize, 2u);
  EXPECT_EQ(cudaFree(volume.ptr), cudaSuccess);
  EXPECT_EQ(cudaMallocPitch(&p, &pitch, std::size_t{1} << 31, 1), cudaErrorInvalidValue);  // beyond the largest pitch
  EXPECT_EQ(cuda_double_get_counters().pitched_mallocs, before.pitched_mallocs + 2);
  (void)cudaGetLastError();
}

TEST_F(CudaDouble, PinnedHostMemoryIsHostMemoryFreedOnlyByFreeHost)
{
  auto const before = cuda_double_get_counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMallocHost(&p, 1000), cudaSuccess);
  static_cast<char*>(p)[999] = 7;  // the CPU may use it
  EXPECT_EQ(cuda_double_pointer_kind(p), 5);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, p), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  EXPECT_EQ(attributes.hostPointer, p);
  void* device_pointer = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&device_pointer, static_cast<char*>(p) + 10, 0), cudaSuccess);
  EXPECT_EQ(device_pointer, static_cast<char*>(p) + 10);
  EXPECT_EQ(cudaHostGetDevicePointer(&device_pointer, p, 1), cudaErrorInvalidValue);  // flags must be 0
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);                                      // not cudaFree's
  EXPECT_EQ(cudaFreeHost(p), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(p), cudaErrorInvalidValue);

  void* mapped = nullptr;
  ASSERT_EQ(cudaHostAlloc(&mapped, 64, cudaHostAllocPortable), cudaSuccess);
  unsigned flags = 0;
  ASSERT_EQ(cudaHostGetFlags(&flags, mapped), cudaSuccess);
  EXPECT_EQ(flags, unsigned{cudaHostAllocMapped | cudaHostAllocPortable});  // mapped whether asked or not
  EXPECT_EQ(cudaFreeHost(mapped), cudaSuccess);
  EXPECT_EQ(cudaHostAlloc(&mapped, 64, 0x100), cudaErrorInvalidValue);  // not a flag
  void* none = &flags;
  EXPECT_EQ(cudaMallocHost(&none, 0), cudaSuccess);
  EXPECT_EQ(none, nullptr);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.host_mallocs, before.host_mallocs + 2);
  EXPECT_EQ(after.host_frees, before.host_frees + 2);
  (void)cudaGetLastError();
}

TEST_F(CudaDouble, ResetCounters)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 16, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFree(&p), cudaErrorInvalidValue);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamLegacy);
  cuda_double_reset_counters();
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.native_mallocs + c.native_frees + c.pool_allocs + c.pool_frees + c.pools_created + c.pools_destroyed +
              c.failed_calls,
            0u);
  EXPECT_EQ(cuda_double_last_alloc_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cuda_double_last_free_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // not a counter
}

}  // namespace
