// Peer access, export handle types and legacy IPC, with libasyncshim.so
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

// ---- ShimPeerAccess: peer access, two devices (docs/design.md, "Several GPUs")

using ShimPeerAccess = ShimTest;

constexpr int readwrite = 3;

TEST_F(ShimPeerAccess, PoolsFollowPeerAccessBeforeAndAfterTheyAreMade)
{
  // Device 0's pool exists before device 1 is given access to it.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* on0 = nullptr;
  ASSERT_EQ(cudaMalloc(&on0, 1000), cudaSuccess);
  cudaMemPool_t const pool0 = cuda_double_pointer_pool(on0);
  EXPECT_EQ(cuda_double_pool_access(pool0, 1), 0);
  auto const start = cuda_double_get_counters();

  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
  EXPECT_EQ(cuda_double_pool_access(pool0, 1), readwrite);
  EXPECT_TRUE(cuda_double_can_access(1, on0));

  // Device 1 gives device 0 access before device 1's pool exists.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* on1 = nullptr;
  ASSERT_EQ(cudaMalloc(&on1, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pool_access(cuda_double_pointer_pool(on1), 0), readwrite);
  EXPECT_TRUE(cuda_double_can_access(0, on1));

  // The owner itself is never passed to cudaMemPoolSetAccess.
  EXPECT_EQ(cuda_double_get_counters().pool_access_owner_entries, start.pool_access_owner_entries);

  // Disabling takes the access away again, as natively.
  ASSERT_EQ(cudaDeviceDisablePeerAccess(0), cudaSuccess);  // from device 1 to device 0
  EXPECT_EQ(cuda_double_pool_access(pool0, 1), 0);
  EXPECT_FALSE(cuda_double_can_access(1, on0));
  // Errors of the program's calls are the native ones; the shim adds nothing.
  EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice);
  (void)cudaGetLastError();

  EXPECT_EQ(cudaFree(on1), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaFree(on0), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- ShimIpcHint: legacy IPC on a pool without an export handle type

using ShimIpcHint = ShimTest;

TEST_F(ShimIpcHint, FailingIpcHandleOnPoolMemoryGetsOneHint)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaIpcMemHandle_t handle{};
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, p), cudaErrorInvalidValue);  // as for any pool memory
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const text = log_text();
  EXPECT_NE(text.find("warning: cudaIpcGetMemHandle/cuIpcGetMemHandle failed with CUDA_ERROR_INVALID_VALUE (1: "
                      "invalid argument) on memory from the asyncshim pool"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("legacy IPC works on pool memory only with ASYNCSHIM_EXPORT_HANDLE_TYPE=auto (the default) or "
                      "posix_file_descriptor, and this pool has none"),
            std::string::npos)
    << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;  // once
}

// ---- ShimFabric: a fabric export handle type without IMEX

using ShimFabric = ShimTest;

TEST_F(ShimFabric, PoolIsMadeAndTheFailingExportIsExplained)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(log_text(), "");  // nothing said before the program exports
  cudaMemFabricHandle_t handle{};
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&handle, cuda_double_pointer_pool(p), cudaMemHandleTypeFabric, 0),
            cudaErrorNotPermitted);
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&handle, cuda_double_pointer_pool(p), cudaMemHandleTypeFabric, 0),
            cudaErrorNotPermitted);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotPermitted);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::string const text = log_text();
  EXPECT_NE(text.find("warning: ASYNCSHIM_EXPORT_HANDLE_TYPE=fabric: exporting the pool failed with "
                      "CUDA_ERROR_NOT_PERMITTED (800: CUDA_ERROR_NOT_PERMITTED): this system is not set up for fabric "
                      "handles (IMEX)"),
            std::string::npos)
    << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;  // once
}

// ---- ShimExportablePool: the pool can be exported (posix file descriptors)

using ShimExportablePool = ShimTest;

TEST_F(ShimExportablePool, PoolAndBlockCanBeExported)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaMemPool_t const found = cuda_double_pointer_pool(p);
  ASSERT_NE(found, nullptr);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_NE(found, default_pool);
  int fd = -1;
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, found, cudaMemHandleTypePosixFileDescriptor, 0), cudaSuccess);
  EXPECT_GE(fd, 0);
  cudaMemPoolPtrExportData data{};
  EXPECT_EQ(cudaMemPoolExportPointer(&data, p), cudaSuccess);
  if (fd >= 0) { close(fd); }
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimExportablePool, ABlockSharedThroughLegacyIpcIsQueuedNotFreedInOrder)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  cudaIpcMemHandle_t handle{};
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, p), cudaSuccess);
  auto before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  // Queued: the next allocation on the legacy stream cannot have it at once
  // while another process may still read it.
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  issue_queued_frees();
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  // A block never shared is freed in order (no non-blocking stream here).
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().free_async_legacy_stream, before.free_async_legacy_stream + 1);
  // A block exported after an in-order free: the work before that free is
  // waited for first (the settle point), as the importer may use it at once.
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  before = cuda_double_get_counters();
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, p), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().events_recorded, before.events_recorded + 1);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();
}

}  // namespace
