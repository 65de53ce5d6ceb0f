// selftest_proc_address.cpp: tests of the CUDA TEST DOUBLES (cuda_double.hpp):
// cuGetProcAddress of the driver double: its own functions, versions and the
// legacy ABI, unknown names, the lookup counts.
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

TEST_F(CudaDouble, GetProcAddressHandsOutTheDoublesOwnFunctions)
{
  // Every base name the double knows, and the symbol it stands for (CUDA 13.0,
  // default flags: the legacy-stream variants).
  struct lookup_row {
    char const* base;
    char const* symbol;
  };
  lookup_row const rows[] = {
    {"cuInit", "cuInit"},
    {"cuDriverGetVersion", "cuDriverGetVersion"},
    {"cuDeviceGet", "cuDeviceGet"},
    {"cuDeviceGetCount", "cuDeviceGetCount"},
    {"cuDeviceGetName", "cuDeviceGetName"},
    {"cuDeviceGetAttribute", "cuDeviceGetAttribute"},
    {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain"},
    {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2"},
    {"cuCtxGetCurrent", "cuCtxGetCurrent"},
    {"cuCtxSetCurrent", "cuCtxSetCurrent"},
    {"cuCtxGetDevice", "cuCtxGetDevice"},
    {"cuCtxPushCurrent", "cuCtxPushCurrent_v2"},
    {"cuCtxPopCurrent", "cuCtxPopCurrent_v2"},
    {"cuCtxSynchronize", "cuCtxSynchronize_v2"},
    {"cuMemAlloc", "cuMemAlloc_v2"},
    {"cuMemFree", "cuMemFree_v2"},
    {"cuMemGetInfo", "cuMemGetInfo_v2"},
    {"cuMemcpyHtoD", "cuMemcpyHtoD_v2"},
    {"cuMemcpyDtoH", "cuMemcpyDtoH_v2"},
    {"cuMemsetD8", "cuMemsetD8_v2"},
    {"cuMemAllocAsync", "cuMemAllocAsync"},
    {"cuMemFreeAsync", "cuMemFreeAsync"},
    {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync"},
    {"cuMemPoolCreate", "cuMemPoolCreate"},
    {"cuMemPoolDestroy", "cuMemPoolDestroy"},
    {"cuMemPoolSetAttribute", "cuMemPoolSetAttribute"},
    {"cuMemPoolGetAttribute", "cuMemPoolGetAttribute"},
    {"cuStreamCreate", "cuStreamCreate"},
    {"cuStreamCreateWithPriority", "cuStreamCreateWithPriority"},
    {"cuStreamDestroy", "cuStreamDestroy_v2"},
    {"cuStreamGetFlags", "cuStreamGetFlags"},
    {"cuStreamSynchronize", "cuStreamSynchronize"},
    {"cuStreamQuery", "cuStreamQuery"},
    {"cuStreamWaitEvent", "cuStreamWaitEvent"},
    {"cuEventCreate", "cuEventCreate"},
    {"cuEventDestroy", "cuEventDestroy_v2"},
    {"cuEventRecord", "cuEventRecord"},
    {"cuEventQuery", "cuEventQuery"},
    {"cuEventSynchronize", "cuEventSynchronize"},
    {"cuStreamBeginCapture", "cuStreamBeginCapture_v2"},
    {"cuStreamEndCapture", "cuStreamEndCapture"},
    {"cuStreamIsCapturing", "cuStreamIsCapturing"},
    {"cuThreadExchangeStreamCaptureMode", "cuThreadExchangeStreamCaptureMode"},
    {"cuGraphDestroy", "cuGraphDestroy"},
    {"cuGraphGetNodes", "cuGraphGetNodes"},
    {"cuPointerGetAttribute", "cuPointerGetAttribute"},
    {"cuGetErrorName", "cuGetErrorName"},
    {"cuGetErrorString", "cuGetErrorString"},
    {"cuGetProcAddress", "cuGetProcAddress_v2"},
    {"cuDeviceCanAccessPeer", "cuDeviceCanAccessPeer"},
    {"cuCtxEnablePeerAccess", "cuCtxEnablePeerAccess"},
    {"cuCtxDisablePeerAccess", "cuCtxDisablePeerAccess"},
    {"cuMemPoolSetAccess", "cuMemPoolSetAccess"},
    {"cuMemPoolGetAccess", "cuMemPoolGetAccess"},
    {"cuMemPoolExportToShareableHandle", "cuMemPoolExportToShareableHandle"},
    {"cuMemPoolExportPointer", "cuMemPoolExportPointer"},
    {"cuIpcGetMemHandle", "cuIpcGetMemHandle"},
  };
  for (lookup_row const& row : rows) {
    void* const own = driver_symbol(row.symbol);
    ASSERT_NE(own, nullptr) << row.symbol;
    EXPECT_EQ(proc(row.base), own) << row.base;
    EXPECT_EQ(proc(row.base, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), own) << row.base;
  }
  // The stream-ordered entry points have per-thread-default-stream variants.
  for (char const* base :
       {"cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuStreamSynchronize", "cuStreamQuery",
        "cuStreamWaitEvent", "cuStreamGetFlags", "cuEventRecord", "cuStreamEndCapture", "cuStreamIsCapturing"}) {
    std::string const ptsz = std::string(base) + "_ptsz";
    ASSERT_NE(driver_symbol(ptsz.c_str()), nullptr) << ptsz;
    EXPECT_EQ(proc(base, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), driver_symbol(ptsz.c_str())) << base;
  }
  EXPECT_EQ(proc("cuStreamBeginCapture", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            driver_symbol("cuStreamBeginCapture_v2_ptsz"));
  // Those without a _ptsz variant ignore the flag.
  for (char const* base : {"cuStreamCreateWithPriority", "cuEventQuery", "cuEventSynchronize"}) {
    EXPECT_EQ(proc(base, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), driver_symbol(base)) << base;
  }
  EXPECT_EQ(proc("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void*>(&cuMemAllocAsync_ptsz));
  // Others ignore that flag.
  EXPECT_EQ(proc("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), driver_symbol("cuMemAlloc_v2"));
  EXPECT_EQ(proc("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            driver_symbol("cuMemcpyHtoD_v2"));
  // What the pointers do is what the exported functions do.
  auto const alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(proc("cuMemAlloc"));
  auto const mem_free = reinterpret_cast<decltype(&cuMemFree_v2)>(proc("cuMemFree"));
  CUdeviceptr p = 0;
  ASSERT_EQ(alloc(&p, 64), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 3);
  EXPECT_EQ(mem_free(p), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 0u);
}

TEST_F(CudaDouble, GetProcAddressVersionsAndTheLegacyAbi)
{
  // cuMemAlloc's _v2 ABI is that of CUDA 3.2; the older one is not provided.
  EXPECT_EQ(proc("cuMemAlloc", 3020), driver_symbol("cuMemAlloc_v2"));
  proc("cuMemAlloc", 3010, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  proc("cuMemAllocAsync", 11010, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(proc("cuMemAllocAsync", 11020), driver_symbol("cuMemAllocAsync"));
  proc("cuDevicePrimaryCtxRelease", 10020, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // cuStreamDestroy: the CUDA 2.0 ABI (its own export) before 4.0, _v2 from 4.0.
  void* const destroy_v1 = driver_symbol("cuStreamDestroy");
  ASSERT_NE(destroy_v1, nullptr);
  EXPECT_EQ(destroy_v1, reinterpret_cast<void*>(&cuStreamDestroy_v1));
  EXPECT_NE(destroy_v1, driver_symbol("cuStreamDestroy_v2"));
  EXPECT_EQ(proc("cuStreamDestroy", 2000), destroy_v1);
  EXPECT_EQ(proc("cuStreamDestroy", 3020), destroy_v1);
  EXPECT_EQ(proc("cuStreamDestroy", 4000), driver_symbol("cuStreamDestroy_v2"));
  proc("cuStreamDestroy", 1000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // cuDevicePrimaryCtxReset: the CUDA 7.0 ABI, which no symbol is, before
  // 11.0; _v2 from 11.0.
  void* const reset_v1 = proc("cuDevicePrimaryCtxReset", 7000);
  ASSERT_NE(reset_v1, nullptr);
  EXPECT_EQ(proc("cuDevicePrimaryCtxReset", 10090), reset_v1);
  EXPECT_NE(reset_v1, driver_symbol("cuDevicePrimaryCtxReset_v2"));
  EXPECT_EQ(driver_symbol("cuDevicePrimaryCtxReset"), nullptr);
  EXPECT_EQ(proc("cuDevicePrimaryCtxReset", 11000), driver_symbol("cuDevicePrimaryCtxReset_v2"));
  proc("cuDevicePrimaryCtxReset", 6050, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  auto const before_reset = cuda_double_get_counters();
  EXPECT_EQ(reinterpret_cast<CUresult (*)(CUdevice)>(reset_v1)(0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_get_counters().primary_context_resets, before_reset.primary_context_resets + 1);
  // cuCtxSynchronize: no parameter before 13.0, cuCtxSynchronize_v2(ctx) from 13.0.
  EXPECT_EQ(proc("cuCtxSynchronize", 12090), driver_symbol("cuCtxSynchronize"));
  EXPECT_EQ(proc("cuCtxSynchronize", 13000), driver_symbol("cuCtxSynchronize_v2"));
  EXPECT_EQ(proc("cuCtxSynchronize", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            driver_symbol("cuCtxSynchronize_v2"));
  // The other new names, just below and at their first version.
  struct since_row {
    char const* base;
    int version;
    char const* symbol;
  };
  since_row const since[] = {
    {"cuEventDestroy", 4000, "cuEventDestroy_v2"},
    {"cuStreamWaitEvent", 3020, "cuStreamWaitEvent"},
    {"cuStreamCreateWithPriority", 5050, "cuStreamCreateWithPriority"},
    {"cuStreamGetFlags", 5050, "cuStreamGetFlags"},
    {"cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2"},  // the 10.0 ABI (no mode) is not provided
    {"cuStreamEndCapture", 10000, "cuStreamEndCapture"},
    {"cuStreamIsCapturing", 10000, "cuStreamIsCapturing"},
    {"cuThreadExchangeStreamCaptureMode", 10010, "cuThreadExchangeStreamCaptureMode"},
    {"cuGraphDestroy", 10000, "cuGraphDestroy"},
    {"cuGraphGetNodes", 10000, "cuGraphGetNodes"},
    {"cuEventCreate", 2000, "cuEventCreate"},
    {"cuStreamQuery", 2000, "cuStreamQuery"},
    {"cuDeviceCanAccessPeer", 4000, "cuDeviceCanAccessPeer"},
    {"cuCtxEnablePeerAccess", 4000, "cuCtxEnablePeerAccess"},
    {"cuCtxDisablePeerAccess", 4000, "cuCtxDisablePeerAccess"},
    {"cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle"},
    {"cuMemPoolSetAccess", 11020, "cuMemPoolSetAccess"},
    {"cuMemPoolGetAccess", 11020, "cuMemPoolGetAccess"},
    {"cuMemPoolExportToShareableHandle", 11020, "cuMemPoolExportToShareableHandle"},
    {"cuMemPoolExportPointer", 11020, "cuMemPoolExportPointer"},
  };
  for (since_row const& row : since) {
    EXPECT_EQ(proc(row.base, row.version), driver_symbol(row.symbol)) << row.base;
    proc(row.base, row.version - 10, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
         CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  }
  // cuGetProcAddress: the CUDA 11.3 ABI (no symbolStatus) below 12.0, _v2 from 12.0.
  void* const v1 = driver_symbol("cuGetProcAddress");
  void* const v2 = driver_symbol("cuGetProcAddress_v2");
  ASSERT_NE(v1, nullptr);
  ASSERT_NE(v1, v2);
  EXPECT_EQ(v1, reinterpret_cast<void*>(&cuGetProcAddress_v1));
  EXPECT_EQ(proc("cuGetProcAddress", 11030), v1);
  EXPECT_EQ(proc("cuGetProcAddress", 11080), v1);
  EXPECT_EQ(proc("cuGetProcAddress", 12000), v2);
  EXPECT_EQ(proc("cuGetProcAddress", 13000), v2);
  proc("cuGetProcAddress", 11020, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

  // The self-lookup, used: cuGetProcAddress_v2 through itself ...
  auto const self = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(proc("cuGetProcAddress"));
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  EXPECT_EQ(self("cuMemAlloc", &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(pfn, driver_symbol("cuMemAlloc_v2"));
  // ... and the legacy ABI: the same answers without a status.
  auto const legacy = reinterpret_cast<decltype(&cuGetProcAddress_v1)>(proc("cuGetProcAddress", 11030));
  pfn = nullptr;
  EXPECT_EQ(legacy("cuMemFree", &pfn, 11030, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(pfn, driver_symbol("cuMemFree_v2"));
  EXPECT_EQ(legacy("cuStreamSynchronize", &pfn, 11030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), CUDA_SUCCESS);
  EXPECT_EQ(pfn, driver_symbol("cuStreamSynchronize_ptsz"));
  EXPECT_EQ(legacy("cuNoSuchFunction", &pfn, 11030, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
  EXPECT_EQ(legacy("cuMemAlloc", &pfn, 3000, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
}

TEST_F(CudaDouble, GetProcAddressUnknownNamesAndBadArguments)
{
  proc("cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // Exported names with a suffix are not base names.
  proc("cuMemAlloc_v2", 13000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  proc("cuMemAllocAsync_ptsz", 13000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  proc("cuda_double_get_counters", 13000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND,
       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  proc("", 13000, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // symbolStatus may be NULL.
  void* pfn = reinterpret_cast<void*>(std::uintptr_t{1});
  EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchFunction", &pfn, 13000, 0, nullptr), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 13000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pfn, driver_symbol("cuMemAlloc_v2"));
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 3000, 0, nullptr), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
  // Bad arguments.
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &pfn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", nullptr, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 13000, 4, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v1("cuMemAlloc", &pfn, 13000, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 11u);
}

TEST_F(CudaDouble, GetProcAddressCountsLookupsByName)
{
  EXPECT_EQ(cuda_double_proc_lookups("cuMemAlloc"), 0u);  // SetUp reset the counters
  void* pfn = nullptr;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 13000, 0, nullptr), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuGetProcAddress_v1("cuMemAlloc", &pfn, 11030, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 1000, 0, nullptr), CUDA_ERROR_NOT_FOUND);  // counted too
  EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchFunction", &pfn, 13000, 0, nullptr), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuda_double_proc_lookups("cuMemAlloc"), 5u);
  EXPECT_EQ(cuda_double_proc_lookups("cuNoSuchFunction"), 1u);
  EXPECT_EQ(cuda_double_proc_lookups("cuMemFree"), 0u);
  EXPECT_EQ(cuda_double_proc_lookups(nullptr), 0u);
  cuda_double_reset_counters();
  EXPECT_EQ(cuda_double_proc_lookups("cuMemAlloc"), 0u);
}

TEST_F(CudaDouble, DriverCountersAreResetWithTheOthers)
{
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.driver_mallocs, 1u);
  EXPECT_EQ(c.driver_frees, 1u);
  EXPECT_EQ(c.failed_calls, 1u);
  cuda_double_reset_counters();
  c = cuda_double_get_counters();
  EXPECT_EQ(c.driver_mallocs + c.driver_frees + c.failed_calls, 0u);
}

}  // namespace
