// selftest_configurations.cpp: tests of the CUDA TEST DOUBLES
// (cuda_double.hpp): the configurations other than the default one
// (CUDA_DOUBLE_* set, or the driver not initialized yet, or the runtime's entry
// points not fetched yet), one suite each.
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

// ------------------------------------------------------------ Defaults

TEST(Defaults, OneDeviceEightGiBFabricAndPosixHandles)
{
  REQUIRE_CONFIG(only_env(), "a CUDA_DOUBLE_* variable is set");
  int n = 0;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, 8589934592u);
  int v = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolSupportedHandleTypes, 0), cudaSuccess);
  EXPECT_EQ(v, 9);
}

// ------------------------------------------------------------ DriverUninitialized

// True while nothing in this process has initialized the driver.
bool driver_uninitialized()
{
  int n = 0;
  return cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED;
}

TEST(DriverUninitialized, OnlyCuInitWorksBeforeCuInit)
{
  REQUIRE_CONFIG(only_env() && driver_uninitialized(),
                 "needs no CUDA_DOUBLE_* variable and a process of its own (run this test alone)");
  int v = 0;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13000);
  char const* s = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s), CUDA_SUCCESS);
  EXPECT_EQ(proc("cuInit"), driver_symbol("cuInit"));
  int n = -1;
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CUdevice d = -1;
  EXPECT_EQ(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), CUDA_ERROR_NOT_INITIALIZED);
  CUcontext c = nullptr;
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&c, 0), CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemFree_v2(0), CUDA_ERROR_NOT_INITIALIZED);
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemAllocAsync(&p, 16, nullptr), CUDA_ERROR_NOT_INITIALIZED);
  auto const props = driver_pool_props(0);
  CUmemoryPool pool = nullptr;
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuPointerGetAttribute(&n, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 256), CUDA_ERROR_NOT_INITIALIZED);
  CUevent event = nullptr;
  EXPECT_EQ(cuEventCreate(&event, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_NOT_INITIALIZED);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  EXPECT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuGraphDestroy(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDeviceCanAccessPeer(&n, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuCtxEnablePeerAccess(nullptr, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemPoolSetAccess(pool, nullptr, 0), CUDA_ERROR_NOT_INITIALIZED);
  CUipcMemHandle ipc{};
  EXPECT_EQ(cuIpcGetMemHandle(&ipc, 256), CUDA_ERROR_NOT_INITIALIZED);

  EXPECT_EQ(cuInit(2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(current_context(), nullptr);  // cuInit makes no context current
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 26u);
}

TEST(DriverUninitialized, TheRuntimeInitializesTheDriver)
{
  REQUIRE_CONFIG(only_env() && driver_uninitialized(),
                 "needs no CUDA_DOUBLE_* variable and a process of its own (run this test alone)");
  int n = -1;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);  // the real runtime calls cuInit first
  EXPECT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(current_context(), nullptr);  // counting devices makes no context current
  EXPECT_EQ(cudaGetDevice(&n), cudaSuccess);
  EXPECT_EQ(current_context(), nullptr);  // nor does asking for the device
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(current_context(), primary_context(0));
  EXPECT_EQ(cuMemFree_v2(as_deviceptr(p)), CUDA_SUCCESS);
}

// ------------------------------------------------------------ RuntimeLookups

// What the runtime double fetches with cuGetProcAddress_v2 (base names).
char const* const runtime_lookups[] = {"cuStreamCreate",
                                       "cuStreamCreateWithPriority",
                                       "cuStreamDestroy",
                                       "cuStreamGetFlags",
                                       "cuStreamSynchronize",
                                       "cuStreamQuery",
                                       "cuStreamWaitEvent",
                                       "cuEventCreate",
                                       "cuEventDestroy",
                                       "cuEventRecord",
                                       "cuEventQuery",
                                       "cuEventSynchronize",
                                       "cuStreamBeginCapture",
                                       "cuStreamEndCapture",
                                       "cuStreamIsCapturing",
                                       "cuThreadExchangeStreamCaptureMode",
                                       "cuGraphDestroy",
                                       "cuGraphGetNodes",
                                       "cuCtxSynchronize",
                                       "cuDevicePrimaryCtxReset",
                                       "cuDevicePrimaryCtxRetain",
                                       "cuDeviceCanAccessPeer",
                                       "cuCtxEnablePeerAccess",
                                       "cuCtxDisablePeerAccess",
                                       "cuMemPoolSetAccess",
                                       "cuMemPoolGetAccess",
                                       "cuMemPoolExportToShareableHandle",
                                       "cuMemPoolExportPointer",
                                       "cuIpcGetMemHandle",
                                       "cuMemPoolImportFromShareableHandle",
                                       "cuMemPoolImportPointer",
                                       "cuIpcOpenMemHandle",
                                       "cuIpcCloseMemHandle",
                                       "cuMemGetInfo"};

bool runtime_lookups_are(unsigned long long expected)
{
  for (char const* name : runtime_lookups) {
    if (cuda_double_proc_lookups(name) != expected) { return false; }
  }
  return true;
}

TEST(RuntimeLookups, TheRuntimeFetchesItsDriverEntryPointsOnceThroughGetProcAddress)
{
  REQUIRE_CONFIG(only_env() && runtime_lookups_are(0),
                 "needs no CUDA_DOUBLE_* variable and a process of its own (run this test alone)");
  // Allocation and pool calls go through the internal API: no lookups.
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 64, cudaStreamPerThread), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, cudaStreamPerThread), cudaSuccess);
  EXPECT_TRUE(runtime_lookups_are(0));

  // The first calls that need the driver, on many threads at once: every
  // entry point is fetched exactly once.
  constexpr int thread_count = 8;
  std::promise<void> go;
  std::shared_future<void> const start = go.get_future().share();
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([start, t] {
      start.wait();
      cudaStream_t s = nullptr;
      ASSERT_EQ(t % 2 == 0 ? cudaStreamCreate(&s) : cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1),
                cudaSuccess);
      unsigned flags = 0;
      EXPECT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
      cudaEvent_t e = nullptr;
      ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
      EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
      EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
      EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
      EXPECT_EQ(cudaStreamWaitEvent(s, e, 0), cudaSuccess);
      cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
      EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
      EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
      EXPECT_EQ(status, cudaStreamCaptureStatusActive);
      cudaGraph_t g = nullptr;
      EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
      std::size_t n = 1;
      EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
      EXPECT_EQ(n, 0u);
      EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
      EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
      EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
      std::size_t free = 0, total = 0;
      EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);  // through cuMemGetInfo, as the real runtime
    });
  }
  go.set_value();
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  for (char const* name : runtime_lookups) {
    EXPECT_EQ(cuda_double_proc_lookups(name), 1u) << name;
  }
  // Nothing else was looked up (the memory calls are not the driver's).
  EXPECT_EQ(cuda_double_proc_lookups("cuMemAlloc"), 0u);
  EXPECT_EQ(cuda_double_proc_lookups("cuMemAllocFromPoolAsync"), 0u);
  EXPECT_EQ(cuda_double_proc_lookups("cuGetProcAddress"), 0u);
  // What the driver functions counted is what the runtime calls did.
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, std::uint64_t{thread_count});
  EXPECT_EQ(c.streams_destroyed, std::uint64_t{thread_count});
  EXPECT_EQ(c.events_recorded, std::uint64_t{thread_count});
  EXPECT_EQ(c.stream_waits, std::uint64_t{thread_count});
  EXPECT_EQ(c.captures_begun, std::uint64_t{thread_count});
  EXPECT_EQ(c.stream_synchronizes, std::uint64_t{thread_count});
  EXPECT_EQ(c.context_synchronizes, std::uint64_t{thread_count});
  EXPECT_EQ(c.primary_context_resets, 1u);
  EXPECT_EQ(c.failed_calls, 0u);
}

// ------------------------------------------------------------ NoDevice / NoDriver

void expect_unavailable(cudaError_t why)
{
  int n = -1;
  EXPECT_EQ(cudaGetDeviceCount(&n), why);
  EXPECT_EQ(n, 0);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), why);
  EXPECT_EQ(cudaFree(nullptr), why);
  EXPECT_EQ(cudaGetDevice(&n), why);
  EXPECT_EQ(cudaSetDevice(0), why);
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), why);
  EXPECT_EQ(cudaDeviceSynchronize(), why);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), why);
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), why);
  EXPECT_EQ(cudaMallocAsync(&p, 16, nullptr), why);
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), why);
  EXPECT_EQ(cudaDeviceGetAttribute(&n, cudaDevAttrMemoryPoolsSupported, 0), why);
  EXPECT_EQ(cudaStreamCreateWithPriority(&s, 0, 0), why);
  cudaEvent_t e = nullptr;
  EXPECT_EQ(cudaEventCreate(&e), why);
  EXPECT_EQ(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal), why);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), why);
  EXPECT_EQ(cudaDeviceReset(), why);
  EXPECT_EQ(cudaDeviceCanAccessPeer(&n, 0, 0), why);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), why);
  cudaIpcMemHandle_t ipc{};
  EXPECT_EQ(cudaIpcGetMemHandle(&ipc, nullptr), why);
  EXPECT_EQ(cudaPeekAtLastError(), why);
  EXPECT_EQ(cudaGetLastError(), why);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaRuntimeGetVersion(&n), cudaSuccess);
  EXPECT_EQ(n, 13000);
  EXPECT_STREQ(cudaGetErrorName(why), why == cudaErrorNoDevice ? "cudaErrorNoDevice" : "cudaErrorInsufficientDriver");
  EXPECT_GE(cuda_double_get_counters().failed_calls, 12u);
}

TEST(NoDevice, EverythingFailsWithNoDevice)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_DEVICES", "0"), "needs CUDA_DOUBLE_DEVICES=0 alone");
  expect_unavailable(cudaErrorNoDevice);
  int v = 0;
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
}

TEST(NoDriver, EverythingFailsWithInsufficientDriver)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NO_DRIVER", "1"), "needs CUDA_DOUBLE_NO_DRIVER=1 alone");
  expect_unavailable(cudaErrorInsufficientDriver);
  int v = -1;
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 0);
}

TEST(NoDevice, DriverInitFailsWithNoDevice)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_DEVICES", "0"), "needs CUDA_DOUBLE_DEVICES=0 alone");
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
  int v = 0;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cuDeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED);  // cuInit failed: still uninitialized
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(proc("cuMemAlloc"), driver_symbol("cuMemAlloc_v2"));
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
}

TEST(NoDriver, TheDriverIsAStubLibrary)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NO_DRIVER", "1"), "needs CUDA_DOUBLE_NO_DRIVER=1 alone");
  EXPECT_EQ(cuInit(0), CUDA_ERROR_STUB_LIBRARY);
  int v = -1;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_ERROR_STUB_LIBRARY);
  EXPECT_EQ(cuDeviceGetCount(&v), CUDA_ERROR_STUB_LIBRARY);
  CUcontext c = nullptr;
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_ERROR_STUB_LIBRARY);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STUB_LIBRARY);
  EXPECT_EQ(cuMemFree_v2(0), CUDA_ERROR_STUB_LIBRARY);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_STUB_LIBRARY);
  CUevent e = nullptr;
  EXPECT_EQ(cuEventCreate(&e, 0), CUDA_ERROR_STUB_LIBRARY);
  EXPECT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_ERROR_STUB_LIBRARY);
  EXPECT_EQ(cuDeviceCanAccessPeer(&v, 0, 0), CUDA_ERROR_STUB_LIBRARY);
  EXPECT_EQ(cuCtxEnablePeerAccess(nullptr, 0), CUDA_ERROR_STUB_LIBRARY);
  // A program can still find cuInit and say what went wrong.
  EXPECT_EQ(proc("cuInit"), driver_symbol("cuInit"));
  char const* s = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_STUB_LIBRARY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_STUB_LIBRARY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA driver is a stub library");
}

// ------------------------------------------------------------ NoPools

TEST(NoPools, PoolCallsAreNotSupported)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NO_POOLS", "1"), "needs CUDA_DOUBLE_NO_POOLS=1 alone");
  int v = -1;
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 0), cudaSuccess);
  EXPECT_EQ(v, 0);
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorNotSupported);
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaErrorNotSupported);
  void* p = nullptr;
  EXPECT_EQ(cudaMallocAsync(&p, 16, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);  // plain cudaMalloc still works
  EXPECT_EQ(cudaFreeAsync(p, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(NoPools, DriverPoolCallsAreNotSupported)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NO_POOLS", "1"), "needs CUDA_DOUBLE_NO_POOLS=1 alone");
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
  int v = -1;
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  CUmemoryPool pool = nullptr;
  auto const props = driver_pool_props(0);
  EXPECT_EQ(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocAsync(&p, 16, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemAllocAsync_ptsz(&p, 16, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);  // plain cuMemAlloc still works
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  // The access and export calls are pool calls too; legacy IPC is not.
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cuMemPoolSetAccess(pool, &desc, 1), CUDA_ERROR_NOT_SUPPORTED);
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &desc.location), CUDA_ERROR_NOT_SUPPORTED);
  int fd = -1;
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  CUmemPoolPtrExportData data{};
  EXPECT_EQ(cuMemPoolExportPointer(&data, p), CUDA_ERROR_NOT_SUPPORTED);
  CUipcMemHandle ipc{};
  EXPECT_EQ(cuIpcGetMemHandle(&ipc, p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  cudaMemAccessDesc rt_desc{};
  rt_desc.location.type = cudaMemLocationTypeDevice;
  rt_desc.flags = cudaMemAccessFlagsProtReadWrite;
  EXPECT_EQ(cudaMemPoolSetAccess(nullptr, &rt_desc, 1), cudaErrorNotSupported);
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, nullptr, cudaMemHandleTypePosixFileDescriptor, 0),
            cudaErrorNotSupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
}

// ------------------------------------------------------------ SmallMemory

TEST(SmallMemory, AccountingCoversMallocAndPoolReservations)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_MEMORY", "16777216"), "needs CUDA_DOUBLE_MEMORY=16777216 alone");
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, 16 * MiB);
  EXPECT_EQ(free, 16 * MiB);

  void* all = nullptr;
  void* one = nullptr;
  ASSERT_EQ(cudaMalloc(&all, 16 * MiB), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaFree(all), cudaSuccess);

  // Pool reservations count: freed pool memory stays reserved until a sync.
  cudaMemPool_t pool = nullptr;
  auto props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 15 * MiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 16 * MiB);
  EXPECT_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&one, MiB), cudaSuccess);

  // 14 MiB + 1 more would need 16 MiB reserved (2 MiB steps) but only 15 MiB is left.
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 14 * MiB + 1, pool, nullptr), cudaErrorMemoryAllocation);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 14 * MiB, pool, nullptr), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);  // gives its reservation back
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, 15 * MiB);
  ASSERT_EQ(cudaFree(one), cudaSuccess);

  // maxSize caps a pool's reservation.
  props.maxSize = 4 * MiB;
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* q = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 3 * MiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMallocFromPoolAsync(&q, 2 * MiB, pool, nullptr), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMallocFromPoolAsync(&q, MiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 4 * MiB);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

TEST(SmallMemory, DriverAndRuntimeShareTheAccounting)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_MEMORY", "16777216"), "needs CUDA_DOUBLE_MEMORY=16777216 alone");
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
  CUdeviceptr all = 0, one = 0;
  ASSERT_EQ(cuMemAlloc_v2(&all, 16 * MiB), CUDA_SUCCESS);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cuMemAlloc_v2(&one, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cudaFree(as_pointer(all)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 16 * MiB), cudaSuccess);
  EXPECT_EQ(cuMemAlloc_v2(&one, 1), CUDA_ERROR_OUT_OF_MEMORY);
  std::size_t free = 1, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(total, 16 * MiB);
  EXPECT_EQ(cuMemFree_v2(as_deviceptr(p)), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

// ------------------------------------------------------------ HandleTypes

TEST(HandleTypes, PoolsRefuseHandleTypesTheDeviceLacks)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_POOL_HANDLE_TYPES", "1"), "needs CUDA_DOUBLE_POOL_HANDLE_TYPES=1 alone");
  int v = -1;
  EXPECT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolSupportedHandleTypes, 0), cudaSuccess);
  EXPECT_EQ(v, 1);
  cudaMemPool_t pool = nullptr;
  auto props = device_pool_props(0, cudaMemHandleTypeFabric);
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorNotSupported);
  props = device_pool_props(0, cudaMemHandleTypePosixFileDescriptor);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

// ------------------------------------------------------------ NoPeer

TEST(NoPeer, NoPairOfDevicesArePeers)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NO_PEER", "1", "CUDA_DOUBLE_DEVICES", "2"),
                 "needs CUDA_DOUBLE_NO_PEER=1 and CUDA_DOUBLE_DEVICES=2 alone");
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cuda_double_reset_counters();
  int can = -1;
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  can = -1;
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 0);
  CUcontext const c0 = primary_context(0), c1 = primary_context(1);
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE);   // the flags first
  EXPECT_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_DEVICE);  // its own context first
  EXPECT_EQ(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessUnsupported);
  void* native = nullptr;
  ASSERT_EQ(cudaMalloc(&native, 64), cudaSuccess);
  EXPECT_EQ(cuda_double_can_access(1, native), 0);
  // A pool cannot grant access to a device that is not a peer; revoking and
  // restating its own device's access still work.
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  auto const cu_pool = reinterpret_cast<CUmemoryPool>(pool);
  auto const grant = access_desc(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(cuMemPoolSetAccess(cu_pool, &grant, 1), CUDA_ERROR_INVALID_DEVICE);
  auto const revoke = access_desc(1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  EXPECT_EQ(cuMemPoolSetAccess(cu_pool, &revoke, 1), CUDA_SUCCESS);
  auto const owner = access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(cuMemPoolSetAccess(cu_pool, &owner, 1), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_access(cu_pool, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cudaFree(native), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.peer_access_enables, 0u);
  EXPECT_EQ(c.pool_access_sets, 2u);
  EXPECT_EQ(c.failed_calls, 6u);
}

// ------------------------------------------------------------ FabricOk

TEST(FabricOk, FabricHandlesCanBeExported)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_FABRIC_OK", "1"), "needs CUDA_DOUBLE_FABRIC_OK=1 alone");
  cudaMemPool_t pool = nullptr, other = nullptr;
  auto const props = device_pool_props(0, cudaMemHandleTypeFabric);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  ASSERT_EQ(cudaMemPoolCreate(&other, &props), cudaSuccess);
  cuda_double_reset_counters();
  CUmemFabricHandle a{}, b{}, c{}, zero{};
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&a, pool, cudaMemHandleTypeFabric, 0), cudaSuccess);
  EXPECT_NE(std::memcmp(&a, &zero, sizeof zero), 0);
  std::thread([&] {  // needs no context
    EXPECT_EQ(cuMemPoolExportToShareableHandle(&b, reinterpret_cast<CUmemoryPool>(pool), CU_MEM_HANDLE_TYPE_FABRIC, 0),
              CUDA_SUCCESS);
  })
    .join();
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);  // names the pool
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&c, other, cudaMemHandleTypeFabric, 0), cudaSuccess);
  EXPECT_NE(std::memcmp(&a, &c, sizeof a), 0);
  int fd = -1;
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
            cudaErrorInvalidValue);  // not a handle type of this pool
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(other), cudaSuccess);
  auto const counters = cuda_double_get_counters();
  EXPECT_EQ(counters.pool_handle_exports, 3u);
  EXPECT_EQ(counters.failed_calls, 1u);
}

// ------------------------------------------------------------ NewerAbi

TEST(NewerAbi, ADriverNewerThanTheHeadersHandsOutANewerAbiOfTheNamedFunctions)
{
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NEWER_ABI", "cuMemAlloc,cuStreamDestroy"),
                 "needs CUDA_DOUBLE_NEWER_ABI=cuMemAlloc,cuStreamDestroy only");
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13010);
  EXPECT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13010);
  // Below 13010 the usual ABIs; from 13010 on another function, for both
  // names listed, whichever flag.
  EXPECT_EQ(proc("cuMemAlloc", 13000), driver_symbol("cuMemAlloc_v2"));
  void* const newer = proc("cuMemAlloc", 13010);
  ASSERT_NE(newer, nullptr);
  EXPECT_NE(newer, driver_symbol("cuMemAlloc_v2"));
  EXPECT_EQ(proc("cuMemAlloc", 13020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), newer);
  EXPECT_EQ(proc("cuStreamDestroy", 13010), newer);
  EXPECT_EQ(proc("cuStreamDestroy", 4000), driver_symbol("cuStreamDestroy_v2"));
  // Not the others.
  EXPECT_EQ(proc("cuMemFree", 13010), driver_symbol("cuMemFree_v2"));
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(reinterpret_cast<CUresult (*)()>(newer)(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, before.failed_calls + 1);
}

}  // namespace
