// Settings, disabling and the API levels intercepted, with libasyncshim.so
// preloaded into a program linked against the CUDA test double. The shim reads
// its settings once per process, so each suite runs in an environment of its
// own, stated in tests/shim/CMakeLists.txt (shim_case) and checked at the start
// of each test (suite_environment.hpp).
#include "cuda_double.hpp"
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

// ---- ShimBadSetting: a setting that is not valid

using ShimBadSetting = ShimTest;

TEST_F(ShimBadSetting, SaysSoAndPassesEverythingThrough)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("error: ASYNCSHIM_RELEASE_THRESHOLD='lots' is not a valid size"), std::string::npos) << log;
  EXPECT_NE(log.find("asyncshim is disabled for this process"), std::string::npos) << log;
}

// ---- ShimDisabled: the shim disabled

using ShimDisabled = ShimTest;

TEST_F(ShimDisabled, EverythingGoesToTheNativeAllocator)
{
  auto const before = cuda_double_get_counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().pools_created, before.pools_created);
}

// ---- ShimUnsupportedExport: an export handle type the device lacks (the double
// lists posix fd and fabric only)

using ShimUnsupportedExport = ShimTest;

TEST_F(ShimUnsupportedExport, DevicePassesThroughWithAClearError)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);  // said once, still native
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("error: device 0: cannot create the asyncshim pool (initial size: none, the default; release "
                     "threshold: the device's total memory, the default; export handle type: win32, from "
                     "ASYNCSHIM_EXPORT_HANDLE_TYPE): export handle type win32 is not supported by device 0, whose "
                     "memory pools support: posix_file_descriptor, fabric (cudaDevAttrMemoryPoolSupportedHandleTypes "
                     "= 9). Set ASYNCSHIM_EXPORT_HANDLE_TYPE to a handle type the device supports, or to none. "
                     "cudaMalloc and cudaFree on device 0 go to the native allocator"),
            std::string::npos)
    << log;
  // For people: no source file, line or function of the shim's.
  EXPECT_EQ(log.find(".cpp"), std::string::npos) << log;
  EXPECT_EQ(log.find("try_"), std::string::npos) << log;
  EXPECT_EQ(log.find("cannot create"), log.rfind("cannot create")) << "said more than once:\n" << log;
}

// ---- ShimInfoLog: the info log, and a misspelt variable

using ShimInfoLog = ShimTest;

TEST_F(ShimInfoLog, PrintsSettingsRedirectionAndTypoWarnings)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("info: settings: "), std::string::npos) << log;
  EXPECT_NE(log.find("info: device 0: cudaMalloc is redirected to an asyncshim pool"), std::string::npos) << log;
  EXPECT_NE(log.find("warning: unknown variable ASYNCSHIM_INITAL_POOL_SIZE (ignored); did you mean "
                     "ASYNCSHIM_INITIAL_POOL_SIZE?"),
            std::string::npos)
    << log;
}

// ---- ShimCrossLevel: both levels intercepted; ShimDriverOnly: the driver level only

using ShimCrossLevel = ShimTest;

TEST_F(ShimCrossLevel, MemoryFromEitherLevelIsFreedThroughTheOther)
{
  void* runtime_ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&runtime_ptr, 4096), cudaSuccess);  // also makes a context current
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), pool);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(runtime_ptr)), CUDA_SUCCESS);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), unknown);
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees + 1);

  CUdeviceptr driver_ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&driver_ptr, 8192), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), pool);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(driver_ptr)), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_ERROR_INVALID_VALUE);  // a double free while queued, as natively
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), unknown);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_ERROR_INVALID_VALUE);  // and once issued
}

TEST_F(ShimCrossLevel, DriverEdgeCasesBehaveNatively)
{
  void* warm = nullptr;
  ASSERT_EQ(cudaMalloc(&warm, 1), cudaSuccess);
  EXPECT_EQ(cuMemAlloc_v2(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
  p = 0xdead00;
  EXPECT_EQ(cuMemAlloc_v2(&p, std::size_t{1} << 50), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(p, 0U);
  EXPECT_EQ(cudaFree(warm), cudaSuccess);
}

using ShimDriverOnly = ShimTest;

TEST_F(ShimDriverOnly, OnlyTheDriverLevelIsIntercepted)
{
  void* runtime_ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&runtime_ptr, 4096), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), native);  // (the double's runtime calls no driver export)
  CUdeviceptr driver_ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&driver_ptr, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), pool);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_SUCCESS);
  EXPECT_EQ(cudaFree(runtime_ptr), cudaSuccess);
}

}  // namespace
