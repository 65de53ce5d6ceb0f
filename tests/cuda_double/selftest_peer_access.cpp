// selftest_peer_access.cpp: tests of the CUDA TEST DOUBLES (cuda_double.hpp):
// peer access, pool access, pool exports and legacy IPC handles, through both
// APIs. A program of its own: the runtime keeps a retain of each peer device's
// primary context it used (cudaDeviceEnablePeerAccess), which the context tests
// of the other files would see.
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

// ------------------------------------------------------------ CudaDouble: peer access, pool access, exports, IPC

// Pushes a device's primary context for its lifetime (driver API).
class context_scope {
 public:
  explicit context_scope(int device) { EXPECT_EQ(cuCtxPushCurrent_v2(primary_context(device)), CUDA_SUCCESS); }
  ~context_scope() { EXPECT_EQ(cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS); }
  context_scope(context_scope const&) = delete;
  context_scope& operator=(context_scope const&) = delete;
};

TEST_F(CudaDouble, DriverCanAccessPeer)
{
  int can = -1;
  EXPECT_EQ(cuDeviceCanAccessPeer(nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, devices_, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, devices_), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, -1, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(can, -1);
  std::thread([] {  // needs no context
    int self = -1;
    EXPECT_EQ(cuDeviceCanAccessPeer(&self, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(self, 0);  // a device is not its own peer
  })
    .join();
  for (int d = 0; d < devices_; ++d) {
    for (int peer = 0; peer < devices_; ++peer) {
      EXPECT_EQ(cuDeviceCanAccessPeer(&can, d, peer), CUDA_SUCCESS);
      EXPECT_EQ(can, d == peer ? 0 : 1) << d << " -> " << peer;  // every pair of distinct devices
    }
  }
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 4u);
}

TEST_F(CudaDouble, DriverPeerAccessRules)
{
  CUcontext const c0 = primary_context(0);
  ASSERT_EQ(current_context(), c0);
  int const not_a_context = 0;
  auto const bogus = reinterpret_cast<CUcontext>(const_cast<int*>(&not_a_context));
  // Checked in order: flags, the peer handle, the own context.
  EXPECT_EQ(cuCtxEnablePeerAccess(c0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxEnablePeerAccess(nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxEnablePeerAccess(nullptr, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxEnablePeerAccess(bogus, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_DEVICE);  // its own context / device
  EXPECT_EQ(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(cuCtxDisablePeerAccess(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDisablePeerAccess(bogus), CUDA_ERROR_INVALID_CONTEXT);
  std::thread([c0] {  // both need a current context
    EXPECT_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxDisablePeerAccess(c0), CUDA_ERROR_INVALID_CONTEXT);
  })
    .join();
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.failed_calls, 10u);
  EXPECT_EQ(c.peer_access_enables + c.peer_access_disables, 0u);
  if (devices_ < 2) { GTEST_SKIP() << "the rest needs two devices"; }

  CUcontext const c1 = primary_context(1);
  void* native0 = nullptr;
  ASSERT_EQ(cudaMalloc(&native0, 256), cudaSuccess);
  void* native1 = nullptr;
  CUdeviceptr driver1 = 0, pooled1 = 0;
  {
    context_scope on1(1);
    ASSERT_EQ(cudaMalloc(&native1, 256), cudaSuccess);  // the current context's device: 1
    ASSERT_EQ(cuMemAlloc_v2(&driver1, 256), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAllocAsync(&pooled1, 256, nullptr), CUDA_SUCCESS);
  }
  char* const inside1 = static_cast<char*>(native1) + 100;
  EXPECT_EQ(cuda_double_can_access(1, native1), 1);  // its own device
  EXPECT_EQ(cuda_double_can_access(0, native1), 0);
  EXPECT_EQ(cuda_double_can_access(0, inside1), 0);

  // 0 -> 1: device 0 may access device 1's cudaMalloc / cuMemAlloc memory, not its pool memory.
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_EQ(cuda_double_can_access(0, native1), 1);
  EXPECT_EQ(cuda_double_can_access(0, inside1), 1);
  EXPECT_EQ(cuda_double_can_access(0, as_pointer(driver1)), 1);
  EXPECT_EQ(cuda_double_can_access(0, as_pointer(pooled1)), 0);  // pools do not follow peer access
  EXPECT_EQ(cuda_double_can_access(1, native0), 0);              // one direction only
  EXPECT_EQ(cuda_double_can_access(2, native1), 0);              // no such device (or not a peer)
  int host = 0;
  EXPECT_EQ(cuda_double_can_access(0, &host), 0);
  {
    context_scope on1(1);
    EXPECT_EQ(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);  // 1 -> 0 was never enabled
    EXPECT_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_can_access(1, native0), 1);
  }
  // Disabling takes it away, in that direction only.
  EXPECT_EQ(cuCtxDisablePeerAccess(c1), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(cuda_double_can_access(0, native1), 0);
  EXPECT_EQ(cuda_double_can_access(1, native0), 1);
  c = cuda_double_get_counters();
  EXPECT_EQ(c.peer_access_enables, 2u);
  EXPECT_EQ(c.peer_access_disables, 1u);

  // A reset of device 1 drops the access from its context and to it.
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(1), CUDA_SUCCESS);  // device 1's memory goes too
  EXPECT_EQ(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  {
    context_scope on1(1);
    EXPECT_EQ(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  }
  EXPECT_EQ(cuda_double_can_access(1, native0), 0);
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);  // and can be enabled again
  EXPECT_EQ(cuCtxDisablePeerAccess(c1), CUDA_SUCCESS);
  c = cuda_double_get_counters();
  EXPECT_EQ(c.peer_access_enables, 4u);
  EXPECT_EQ(c.peer_access_disables, 2u);  // the reset's drops are not counted
  EXPECT_EQ(cudaFree(native0), cudaSuccess);
}

TEST_F(CudaDouble, RuntimePeerAccessReachesTheDriver)
{
  int can = -1;
  EXPECT_EQ(cudaDeviceCanAccessPeer(nullptr, 0, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, devices_), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 0), cudaSuccess);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(devices_, 0), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(-1, 0), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);  // the current device itself
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(devices_), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 8u);
  std::thread([] {
    int flag = -1;
    EXPECT_EQ(cudaDeviceCanAccessPeer(&flag, 0, 0), cudaSuccess);
    EXPECT_EQ(current_context(), nullptr);  // a device query: no context made current
    EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    EXPECT_EQ(current_context(), primary_context(0));  // works from the runtime device's context
  }).join();
  if (devices_ < 2) { GTEST_SKIP() << "the rest needs two devices"; }

  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  void* on1 = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&on1, 64), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);  // context 0 -> context 1
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cuda_double_can_access(0, on1), 1);
  EXPECT_EQ(cuCtxEnablePeerAccess(primary_context(1), 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);  // one model
  // The runtime holds a retain of the peer's primary context (taken once).
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  CUcontext again = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&again, 1), CUDA_SUCCESS);  // given back
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);  // one direction
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
  EXPECT_EQ(cuda_double_can_access(0, on1), 0);
  // cudaDeviceReset of either device ends it too.
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);  // on1 goes with it
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.peer_access_enables, 2u);
  EXPECT_EQ(c.peer_access_disables, 1u);
  EXPECT_EQ(c.failed_calls, 8u + 1u + 4u);  // the thread's, and four here
  (void)cudaGetLastError();
}

TEST_F(CudaDouble, DriverPoolAccess)
{
  CUmemoryPool pool = nullptr;
  auto const props = driver_pool_props(0);
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUmemoryPool default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(reinterpret_cast<cudaMemPool_t*>(&default_pool), 0), cudaSuccess);
  // The owner always reads and writes; pool calls need no context.
  std::thread([pool, default_pool] {
    EXPECT_EQ(driver_pool_access(pool, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(driver_pool_access(default_pool, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  }).join();
  EXPECT_EQ(cuda_double_pool_access(pool, 0), 3);
  // Restating the owner's read-write access is accepted and changes nothing;
  // revoking it is not (the owner's access cannot be changed).
  auto const owner_rw = access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  auto const owner_none = access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  EXPECT_EQ(cuMemPoolSetAccess(pool, &owner_rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolSetAccess(pool, &owner_none, 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMemPoolSetAccess(default_pool, &owner_none, 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(driver_pool_access(pool, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  // Bad descriptors: INVALID_VALUE.
  for (auto const& bad :
       {access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READ),  // read-only: not for device memory
        access_desc(devices_ > 1 ? 1 : 0, CU_MEM_ACCESS_FLAGS_PROT_READ),
        access_desc(0, static_cast<CUmemAccess_flags>(2)), access_desc(0, static_cast<CUmemAccess_flags>(7)),
        access_desc(devices_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), access_desc(-1, CU_MEM_ACCESS_FLAGS_PROT_NONE),
        access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_LOCATION_TYPE_HOST),
        access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_LOCATION_TYPE_INVALID)}) {
    EXPECT_EQ(cuMemPoolSetAccess(pool, &bad, 1), CUDA_ERROR_INVALID_VALUE)
      << bad.location.type << " " << bad.location.id << " " << bad.flags;
  }
  EXPECT_EQ(cuMemPoolSetAccess(pool, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolSetAccess(pool, nullptr, 0), CUDA_SUCCESS);  // nothing to do
  int const not_a_pool = 0;
  auto const bogus = reinterpret_cast<CUmemoryPool>(const_cast<int*>(&not_a_pool));
  EXPECT_EQ(cuMemPoolSetAccess(bogus, &owner_rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolSetAccess(nullptr, &owner_rw, 1), CUDA_ERROR_INVALID_VALUE);
  // cuMemPoolGetAccess's own errors.
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = 0;
  auto flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  EXPECT_EQ(cuMemPoolGetAccess(nullptr, pool, &location), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, bogus, &location), CUDA_ERROR_INVALID_VALUE);
  location.id = devices_;
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &location), CUDA_ERROR_INVALID_VALUE);
  location.id = 0;
  location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &location), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuda_double_pool_access(pool, devices_), 0);
  EXPECT_EQ(cuda_double_pool_access(nullptr, 0), 0);
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_access_sets, 2u);  // owner read-write, and count 0
  // owner_rw, owner_none twice, and the bad descriptors naming device 0 as a device.
  EXPECT_EQ(c.pool_access_owner_entries, devices_ > 1 ? 6u : 7u);
  EXPECT_EQ(c.failed_calls, 2u + 8u + 3u + 5u);

  if (devices_ >= 2) {
    // Another device: none until granted, whatever peer access says.
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocFromPoolAsync(&p, 256, pool, nullptr), CUDA_SUCCESS);
    void* native = nullptr;
    ASSERT_EQ(cudaMalloc(&native, 256), cudaSuccess);
    EXPECT_EQ(driver_pool_access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    {
      context_scope on1(1);
      ASSERT_EQ(cuCtxEnablePeerAccess(primary_context(0), 0), CUDA_SUCCESS);
    }
    EXPECT_EQ(cuda_double_can_access(1, native), 1);
    EXPECT_EQ(cuda_double_can_access(1, as_pointer(p)), 0);
    EXPECT_EQ(cuda_double_pool_access(pool, 1), 0);
    auto const grant = access_desc(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(cuMemPoolSetAccess(pool, &grant, 1), CUDA_SUCCESS);
    EXPECT_EQ(driver_pool_access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(cuda_double_pool_access(pool, 1), 3);
    EXPECT_EQ(cuda_double_can_access(1, as_pointer(p)), 1);
    EXPECT_EQ(cuda_double_can_access(1, static_cast<char*>(as_pointer(p)) + 255), 1);
    // All or nothing: one bad entry and none is applied.
    CUmemAccessDesc const mixed[] = {access_desc(1, CU_MEM_ACCESS_FLAGS_PROT_NONE), owner_none};
    EXPECT_EQ(cuMemPoolSetAccess(pool, mixed, 2), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_EQ(driver_pool_access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemAccessDesc const fine[] = {access_desc(1, CU_MEM_ACCESS_FLAGS_PROT_NONE), owner_rw};
    EXPECT_EQ(cuMemPoolSetAccess(pool, fine, 2), CUDA_SUCCESS);
    EXPECT_EQ(driver_pool_access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    EXPECT_EQ(cuda_double_can_access(1, as_pointer(p)), 0);
    // Disabling peer access does not touch a pool's grant.
    EXPECT_EQ(cuMemPoolSetAccess(pool, &grant, 1), CUDA_SUCCESS);
    {
      context_scope on1(1);
      ASSERT_EQ(cuCtxDisablePeerAccess(primary_context(0)), CUDA_SUCCESS);
    }
    EXPECT_EQ(cuda_double_can_access(1, native), 0);
    EXPECT_EQ(cuda_double_can_access(1, as_pointer(p)), 1);
    // A reset of device 1 leaves what device 0's pool grants it; a reset of
    // device 1 gives its default pool back its default access.
    CUmemoryPool default1 = nullptr;
    ASSERT_EQ(cudaDeviceGetDefaultMemPool(reinterpret_cast<cudaMemPool_t*>(&default1), 1), cudaSuccess);
    auto const grant0 = access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(cuMemPoolSetAccess(default1, &grant0, 1), CUDA_SUCCESS);
    EXPECT_EQ(driver_pool_access(default1, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(driver_pool_access(default1, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    ASSERT_EQ(cuDevicePrimaryCtxReset_v2(1), CUDA_SUCCESS);
    EXPECT_EQ(driver_pool_access(default1, 0), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    EXPECT_EQ(driver_pool_access(default1, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(driver_pool_access(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cudaFree(native), cudaSuccess);
    c = cuda_double_get_counters();
    EXPECT_EQ(c.pool_access_sets, 2u + 4u);
  }
  // A destroyed pool's handle is unknown, its access gone.
  ASSERT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolSetAccess(pool, &owner_rw, 1), CUDA_ERROR_INVALID_VALUE);
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &location), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuda_double_pool_access(pool, 0), 0);
}

TEST_F(CudaDouble, RuntimePoolAccessReachesTheDriver)
{
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  cudaMemAccessDesc desc{};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  EXPECT_EQ(cudaMemPoolSetAccess(pool, &desc, 1), cudaSuccess);
  desc.flags = cudaMemAccessFlagsProtNone;
  EXPECT_EQ(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidDevice);
  desc.flags = cudaMemAccessFlagsProtRead;
  EXPECT_EQ(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidValue);
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  desc.location.id = devices_;
  EXPECT_EQ(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = 0;
  auto flags = cudaMemAccessFlagsProtNone;
  EXPECT_EQ(cudaMemPoolGetAccess(&flags, pool, &location), cudaSuccess);
  EXPECT_EQ(flags, cudaMemAccessFlagsProtReadWrite);
  EXPECT_EQ(cudaMemPoolGetAccess(nullptr, pool, &location), cudaErrorInvalidValue);
  if (devices_ >= 2) {
    desc.location.id = 1;
    EXPECT_EQ(cudaMemPoolSetAccess(pool, &desc, 1), cudaSuccess);
    location.id = 1;
    EXPECT_EQ(cudaMemPoolGetAccess(&flags, pool, &location), cudaSuccess);
    EXPECT_EQ(flags, cudaMemAccessFlagsProtReadWrite);
    EXPECT_EQ(cuda_double_pool_access(pool, 1), 3);
    EXPECT_EQ(driver_pool_access(reinterpret_cast<CUmemoryPool>(pool), 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  }
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_access_sets, devices_ >= 2 ? 2u : 1u);
  EXPECT_EQ(c.failed_calls, 4u);
}

TEST_F(CudaDouble, DriverPoolExports)
{
  CUmemoryPool posix = nullptr, fabric = nullptr, both = nullptr, plain = nullptr;
  auto props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ASSERT_EQ(cuMemPoolCreate(&posix, &props), CUDA_SUCCESS);
  props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_FABRIC);
  ASSERT_EQ(cuMemPoolCreate(&fabric, &props), CUDA_SUCCESS);
  props = driver_pool_props(
    0, static_cast<CUmemAllocationHandleType>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC));
  ASSERT_EQ(cuMemPoolCreate(&both, &props), CUDA_SUCCESS);
  props = driver_pool_props(0);
  ASSERT_EQ(cuMemPoolCreate(&plain, &props), CUDA_SUCCESS);
  CUmemoryPool default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(reinterpret_cast<cudaMemPool_t*>(&default_pool), 0), cudaSuccess);

  // A POSIX file descriptor: a real, new one each time, the caller's to close.
  std::thread([posix, both] {  // needs no context
    for (CUmemoryPool pool : {posix, both}) {
      int fd = -1, fd2 = -1;
      ASSERT_EQ(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
      ASSERT_EQ(cuMemPoolExportToShareableHandle(&fd2, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                CUDA_SUCCESS);
      EXPECT_GE(fd, 0);
      EXPECT_NE(fd, fd2);
      int const fd_flags = fcntl(fd, F_GETFD);
      EXPECT_NE(fd_flags, -1);
      EXPECT_NE(fd_flags & FD_CLOEXEC, 0);
      EXPECT_EQ(close(fd), 0);
      EXPECT_EQ(close(fd2), 0);
    }
  })
    .join();
  // Fabric: not permitted without IMEX (CUDA_DOUBLE_FABRIC_OK unset).
  CUmemFabricHandle fh{};
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fh, fabric, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fh, both, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_PERMITTED);
  // Only a handle type the pool was made with, one at a time; flags 0.
  int fd = -7;
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, fabric, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fh, posix, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, default_pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, posix, CU_MEM_HANDLE_TYPE_NONE, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(
    cuMemPoolExportToShareableHandle(
      &fd, both,
      static_cast<CUmemAllocationHandleType>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC), 0),
    CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, posix, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(nullptr, posix, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fd, -7);  // untouched by the failures
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_handle_exports, 4u);
  EXPECT_EQ(c.failed_calls, 2u + 9u);

  // Export data for a pointer: a live allocation of an exportable pool, at its start.
  CUdeviceptr a = 0, b = 0, from_plain = 0, from_default = 0, native = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, 1000, posix, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, 1000, fabric, nullptr), CUDA_SUCCESS);  // exportable too
  ASSERT_EQ(cuMemAllocFromPoolAsync(&from_plain, 1000, plain, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&from_default, 1000, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&native, 1000), CUDA_SUCCESS);
  CUmemPoolPtrExportData da{}, da2{}, db{}, zero{};
  std::thread([&] {  // needs no context
    EXPECT_EQ(cuMemPoolExportPointer(&da, a), CUDA_SUCCESS);
  })
    .join();
  EXPECT_EQ(cuMemPoolExportPointer(&da2, a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolExportPointer(&db, b), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(&da, &zero, sizeof da), 0);
  EXPECT_EQ(std::memcmp(&da, &da2, sizeof da), 0);  // the same allocation: the same data
  EXPECT_NE(std::memcmp(&da, &db, sizeof da), 0);
  CUmemPoolPtrExportData untouched{};
  for (CUdeviceptr bad : {a + 1, a + 256, from_plain, from_default, native, CUdeviceptr{0}}) {
    EXPECT_EQ(cuMemPoolExportPointer(&untouched, bad), CUDA_ERROR_INVALID_VALUE) << bad;
  }
  EXPECT_EQ(std::memcmp(&untouched, &zero, sizeof zero), 0);
  EXPECT_EQ(cuMemPoolExportPointer(nullptr, a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolExportPointer(&untouched, a), CUDA_ERROR_INVALID_VALUE);  // freed
  c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_pointer_exports, 3u);
  EXPECT_EQ(c.failed_calls, 2u + 9u + 8u);

  EXPECT_EQ(cuMemFreeAsync(b, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(from_plain, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(from_default, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(native), CUDA_SUCCESS);
  for (CUmemoryPool pool : {posix, fabric, both, plain}) {
    EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, posix, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);                    // destroyed
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);  // leave the default pool as found
}

TEST_F(CudaDouble, RuntimePoolExportsReachTheDriver)
{
  cudaMemPool_t pool = nullptr, fabric = nullptr;
  auto props = device_pool_props(0, cudaMemHandleTypePosixFileDescriptor);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  props = device_pool_props(0, cudaMemHandleTypeFabric);
  ASSERT_EQ(cudaMemPoolCreate(&fabric, &props), cudaSuccess);
  int fd = -1;
  ASSERT_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0), cudaSuccess);
  EXPECT_NE(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(close(fd), 0);
  CUmemFabricHandle fh{};
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fh, fabric, cudaMemHandleTypeFabric, 0), cudaErrorNotPermitted);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotPermitted);
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeFabric, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 1),
            cudaErrorInvalidValue);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 64, pool, cudaStreamLegacy), cudaSuccess);
  cudaMemPoolPtrExportData data{}, zero{};
  EXPECT_EQ(cudaMemPoolExportPointer(&data, p), cudaSuccess);
  EXPECT_NE(std::memcmp(&data, &zero, sizeof data), 0);
  EXPECT_EQ(cudaMemPoolExportPointer(&data, static_cast<char*>(p) + 1), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(fabric), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.pool_handle_exports, 1u);
  EXPECT_EQ(c.pool_pointer_exports, 1u);
  EXPECT_EQ(c.failed_calls, 4u);
}

TEST_F(CudaDouble, IpcMemHandles)
{
  void* rt = nullptr;
  ASSERT_EQ(cudaMalloc(&rt, 512), cudaSuccess);
  CUdeviceptr drv = 0, pooled = 0, exportable = 0;
  ASSERT_EQ(cuMemAlloc_v2(&drv, 512), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&pooled, 512, nullptr), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  auto const props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&exportable, 512, pool, nullptr), CUDA_SUCCESS);

  // cudaMalloc and cuMemAlloc memory, at its start: a handle (also without a context).
  CUipcMemHandle h_rt{}, h_rt2{}, h_drv{}, zero{};
  std::thread([&] { EXPECT_EQ(cuIpcGetMemHandle(&h_rt, as_deviceptr(rt)), CUDA_SUCCESS); }).join();
  EXPECT_EQ(cuIpcGetMemHandle(&h_rt2, as_deviceptr(rt)), CUDA_SUCCESS);
  EXPECT_EQ(cuIpcGetMemHandle(&h_drv, drv), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(&h_rt, &zero, sizeof zero), 0);
  EXPECT_EQ(std::memcmp(&h_rt, &h_rt2, sizeof zero), 0);  // may be called again: the same handle
  EXPECT_NE(std::memcmp(&h_rt, &h_drv, sizeof zero), 0);
  // Pool memory (any pool), interior, unknown pointers: INVALID_VALUE.
  CUipcMemHandle untouched{};
  for (CUdeviceptr bad : {pooled, exportable, drv + 1, as_deviceptr(rt) + 256, CUdeviceptr{0}, CUdeviceptr{256}}) {
    EXPECT_EQ(cuIpcGetMemHandle(&untouched, bad), CUDA_ERROR_INVALID_VALUE) << bad;
  }
  EXPECT_EQ(std::memcmp(&untouched, &zero, sizeof zero), 0);
  EXPECT_EQ(cuIpcGetMemHandle(nullptr, drv), CUDA_ERROR_INVALID_VALUE);
  // The runtime's, through the driver.
  cudaIpcMemHandle_t r{}, r_zero{};
  EXPECT_EQ(cudaIpcGetMemHandle(&r, rt), cudaSuccess);
  EXPECT_EQ(std::memcmp(&r, &h_rt, sizeof r), 0);
  EXPECT_EQ(cudaIpcGetMemHandle(&r, as_pointer(pooled)), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcGetMemHandle(&r, as_pointer(exportable)), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcGetMemHandle(&r, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcGetMemHandle(nullptr, rt), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  (void)r_zero;
  // Memory freed and allocated again at the same address gets another handle.
  ASSERT_EQ(cudaFree(rt), cudaSuccess);
  EXPECT_EQ(cuIpcGetMemHandle(&untouched, as_deviceptr(rt)), CUDA_ERROR_INVALID_VALUE);
  void* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, 512), cudaSuccess);
  CUipcMemHandle h_again{};
  EXPECT_EQ(cuIpcGetMemHandle(&h_again, as_deviceptr(again)), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(&h_again, &h_rt, sizeof zero), 0) << (again == rt ? "same address" : "another address");
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.ipc_mem_handles, 5u);
  EXPECT_EQ(c.failed_calls, 7u + 4u + 1u);

  EXPECT_EQ(cudaFree(again), cudaSuccess);
  EXPECT_EQ(cuMemFree_v2(drv), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(pooled, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
}

}  // namespace
