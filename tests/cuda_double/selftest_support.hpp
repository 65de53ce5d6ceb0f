// selftest_support.hpp: what the self-tests of the CUDA TEST DOUBLES share (the
// selftest_*.cpp files, one program each): the configuration checks, the
// CudaDouble fixture and small helpers of the runtime and driver APIs.
//
// The doubles read their environment controls once per process, so CMake runs
// each program once per configuration with a --gtest_filter; each suite skips
// itself when the process is not in the configuration it is about:
//   CudaDouble   a working runtime with pools (any number of devices >= 1);
//                the Driver* and GetProcAddress* tests are about the driver
//                double (libcuda.so.1) and its sharing of the model
//   Defaults     no CUDA_DOUBLE_* variable set at all
//   DriverUninitialized  no variable set, and nothing has initialized the
//                driver yet: each test runs alone, in a process of its own
//   NoDevice     CUDA_DOUBLE_DEVICES=0
//   NoDriver     CUDA_DOUBLE_NO_DRIVER=1
//   NoPools      CUDA_DOUBLE_NO_POOLS=1
//   SmallMemory  CUDA_DOUBLE_MEMORY=16777216 (16 MiB), one device
//   HandleTypes  CUDA_DOUBLE_POOL_HANDLE_TYPES=1
//   NoPeer       CUDA_DOUBLE_NO_PEER=1 and CUDA_DOUBLE_DEVICES=2
//   FabricOk     CUDA_DOUBLE_FABRIC_OK=1
//   NewerAbi     CUDA_DOUBLE_NEWER_ABI=cuMemAlloc,cuStreamDestroy
//   RuntimeLookups  no variable set, and the runtime double has not fetched
//                its driver entry points yet: runs alone, in a process of its own
//   IpcChild     the child process of CudaDouble.TwoProcessesSharePoolMemory
//                (selftest_ipc.cpp), which passes it what to import; never
//                run by CMake directly
// Under ctest CUDA_DOUBLE_SELFTEST_STRICT=1 turns those skips into failures, so
// that a configuration gone wrong cannot pass by skipping everything.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <dlfcn.h>

#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda_double.hpp"
#include "cuda_driver_double.hpp"

namespace selftest {

// The environment controls of the doubles that the suites are about.
inline constexpr char const* control_variables[] = {
  "CUDA_DOUBLE_DEVICES",           "CUDA_DOUBLE_NO_DRIVER", "CUDA_DOUBLE_MEMORY",    "CUDA_DOUBLE_NO_POOLS",
  "CUDA_DOUBLE_POOL_HANDLE_TYPES", "CUDA_DOUBLE_NO_PEER",   "CUDA_DOUBLE_FABRIC_OK", "CUDA_DOUBLE_NEWER_ABI"};

// True when exactly the given variables are set (to their values) among the
// controls; with name == nullptr, when none is set.
inline bool only_env(char const* name = nullptr, char const* value = nullptr, char const* name2 = nullptr,
                     char const* value2 = nullptr)
{
  for (char const* var : control_variables) {
    char const* v = std::getenv(var);
    char const* wanted = name != nullptr && std::strcmp(var, name) == 0     ? value
                         : name2 != nullptr && std::strcmp(var, name2) == 0 ? value2
                                                                            : nullptr;
    if (wanted != nullptr) {
      if (v == nullptr || std::strcmp(v, wanted) != 0) { return false; }
    } else if (v != nullptr) {
      return false;
    }
  }
  return true;
}

inline bool strict() { return std::getenv("CUDA_DOUBLE_SELFTEST_STRICT") != nullptr; }

// Skips the test (fails it, when strict) unless the process is in the
// configuration the test is about.
#define REQUIRE_CONFIG(condition, why)               \
  do {                                               \
    if (!(condition)) {                              \
      if (::selftest::strict()) GTEST_FAIL() << why; \
      GTEST_SKIP() << why;                           \
    }                                                \
  } while (false)

inline cudaMemPoolProps device_pool_props(int device, cudaMemAllocationHandleType handles = cudaMemHandleTypeNone)
{
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = handles;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  return props;
}

inline std::uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr)
{
  std::uint64_t value = ~0ULL;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &value), cudaSuccess);
  return value;
}

inline std::size_t free_memory()
{
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

// ------------------------------------------------------------ CudaDouble

class CudaDouble : public ::testing::Test {
 protected:
  void SetUp() override
  {
    int pools = 0;
    char const* devices = std::getenv("CUDA_DOUBLE_DEVICES");
    bool const usable = only_env(devices != nullptr ? "CUDA_DOUBLE_DEVICES" : nullptr, devices) &&
                        cudaGetDeviceCount(&devices_) == cudaSuccess &&
                        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0) == cudaSuccess && pools == 1;
    (void)cudaGetLastError();
    REQUIRE_CONFIG(usable, "needs the default configuration, except perhaps CUDA_DOUBLE_DEVICES (not 0)");
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    live_ = cuda_double_live_allocations();
    cuda_double_reset_counters();
  }
  void TearDown() override
  {
    if (IsSkipped() || HasFatalFailure()) { return; }
    EXPECT_EQ(cuda_double_live_allocations(), live_) << "a test leaked allocations";
    (void)cudaSetDevice(0);
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
  }
  int devices_ = 0;
  int live_ = 0;
};

// ------------------------------------------------------------ the driver double

// The driver double's own definition of an exported symbol (what its
// cuGetProcAddress must hand out), found through the loaded libcuda.so.1.
inline void* driver_symbol(char const* name)
{
  static void* const handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  return handle == nullptr ? nullptr : dlsym(handle, name);
}

inline void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
inline CUdeviceptr as_deviceptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

inline CUcontext primary_context(int device)
{
  CUcontext c = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&c, device), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(device), CUDA_SUCCESS);
  return c;
}

inline CUcontext current_context()
{
  CUcontext c = reinterpret_cast<CUcontext>(std::uintptr_t{1});
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  return c;
}

inline CUmemPoolProps driver_pool_props(int device, CUmemAllocationHandleType handles = CU_MEM_HANDLE_TYPE_NONE)
{
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = handles;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  return props;
}

inline std::uint64_t driver_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
  std::uint64_t value = ~0ULL;
  EXPECT_EQ(cuMemPoolGetAttribute(pool, attr, &value), CUDA_SUCCESS);
  return value;
}

inline std::size_t driver_free_memory()
{
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  return free;
}

// cuGetProcAddress_v2 for one name; checks the status it reports.
inline void* proc(char const* name, int version = 13000, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT,
                  CUresult expected = CUDA_SUCCESS,
                  CUdriverProcAddressQueryResult expected_status = CU_GET_PROC_ADDRESS_SUCCESS)
{
  void* pfn = reinterpret_cast<void*>(std::uintptr_t{1});
  auto status = static_cast<CUdriverProcAddressQueryResult>(-1);
  EXPECT_EQ(cuGetProcAddress_v2(name, &pfn, version, flags, &status), expected) << name << " " << version;
  EXPECT_EQ(status, expected_status) << name << " " << version;
  if (expected != CUDA_SUCCESS) { EXPECT_EQ(pfn, nullptr) << name; }
  return pfn;
}

inline CUmemAccessDesc access_desc(int device, CUmemAccess_flags flags,
                                   CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE)
{
  CUmemAccessDesc desc{};
  desc.location.type = type;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

inline CUmemAccess_flags driver_pool_access(CUmemoryPool pool, int device)
{
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  auto flags = static_cast<CUmemAccess_flags>(-1);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &location), CUDA_SUCCESS);
  return flags;
}

}  // namespace selftest
