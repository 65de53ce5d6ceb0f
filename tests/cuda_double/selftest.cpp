// selftest.cpp: tests of the CUDA runtime TEST DOUBLE itself (cuda_double.hpp).
//
// The double reads its environment controls once per process, so CMake runs
// this program once per configuration with a --gtest_filter; each suite skips
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
//   RuntimeLookups  no variable set, and the runtime double has not fetched
//                its driver entry points yet: runs alone, in a process of its own
// Under ctest CUDA_DOUBLE_SELFTEST_STRICT=1 turns those skips into failures, so
// that a configuration gone wrong cannot pass by skipping everything.
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

#include "cuda_double.hpp"
#include "cuda_driver_double.hpp"
#include "byte_literals.hpp"

namespace {

using byte_literals::MiB;
using byte_literals::PiB;

char const* const vars[] = {"CUDA_DOUBLE_DEVICES",           "CUDA_DOUBLE_NO_DRIVER", "CUDA_DOUBLE_MEMORY",
                             "CUDA_DOUBLE_NO_POOLS",          "CUDA_DOUBLE_POOL_HANDLE_TYPES",
                             "CUDA_DOUBLE_NO_PEER",           "CUDA_DOUBLE_FABRIC_OK"};

// True when exactly the given variables are set (to their values) among the
// controls; with name == nullptr, when none is set.
bool only_env(char const* name = nullptr, char const* value = nullptr, char const* name2 = nullptr,
              char const* value2 = nullptr) {
  for (char const* var : vars) {
    char const* v = std::getenv(var);
    char const* wanted = name != nullptr && std::strcmp(var, name) == 0     ? value
                         : name2 != nullptr && std::strcmp(var, name2) == 0 ? value2
                                                                            : nullptr;
    if (wanted != nullptr) {
      if (v == nullptr || std::strcmp(v, wanted) != 0) return false;
    } else if (v != nullptr) {
      return false;
    }
  }
  return true;
}

bool strict() { return std::getenv("CUDA_DOUBLE_SELFTEST_STRICT") != nullptr; }

// Skips the test (fails it, when strict) unless the process is in the
// configuration the test is about.
#define REQUIRE_CONFIG(condition, why)  \
  do {                                  \
    if (!(condition)) {                 \
      if (strict()) GTEST_FAIL() << why; \
      GTEST_SKIP() << why;              \
    }                                   \
  } while (false)

cudaMemPoolProps device_pool_props(int device, cudaMemAllocationHandleType handles = cudaMemHandleTypeNone) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = handles;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  return props;
}

std::uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t value = ~0ULL;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &value), cudaSuccess);
  return value;
}

std::size_t free_memory() {
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

// ------------------------------------------------------------ CudaDouble

class CudaDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    int pools = 0;
    char const* devices = std::getenv("CUDA_DOUBLE_DEVICES");
    bool const usable = only_env(devices != nullptr ? "CUDA_DOUBLE_DEVICES" : nullptr, devices) &&
                        cudaGetDeviceCount(&devices_) == cudaSuccess &&
                        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0) == cudaSuccess &&
                        pools == 1;
    (void)cudaGetLastError();
    REQUIRE_CONFIG(usable, "needs the default configuration, except perhaps CUDA_DOUBLE_DEVICES (not 0)");
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    live_ = cuda_double_live_allocations();
    cuda_double_reset_counters();
  }
  void TearDown() override {
    if (IsSkipped() || HasFatalFailure()) return;
    EXPECT_EQ(cuda_double_live_allocations(), live_) << "a test leaked allocations";
    (void)cudaSetDevice(0);
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
  }
  int devices_ = 0;
  int live_ = 0;
};

TEST_F(CudaDouble, Versions) {
  int v = 0;
  EXPECT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cudaRuntimeGetVersion(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDriverGetVersion(nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, ErrorNamesAndStrings) {
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

TEST_F(CudaDouble, LastErrorIsPerThreadAndKeptUntilRead) {
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

TEST_F(CudaDouble, CurrentDeviceIsPerThread) {
  int d = -1;
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 0);
  EXPECT_EQ(cudaGetDevice(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(devices_), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetDeviceCount(nullptr), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  if (devices_ < 2) GTEST_SKIP() << "one device";
  EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 1);
  std::thread([] {
    int other = -1;
    EXPECT_EQ(cudaGetDevice(&other), cudaSuccess);
    EXPECT_EQ(other, 0);
  }).join();
}

TEST_F(CudaDouble, DeviceAttributes) {
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

TEST_F(CudaDouble, MallocAndFree) {
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

TEST_F(CudaDouble, MemcpyAndMemset) {
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

TEST_F(CudaDouble, Streams) {
  cudaStream_t s = nullptr, nb = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_NE(s, nullptr);
  EXPECT_NE(s, nb);
  cudaStream_t bad = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&bad, 0x10), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamCreate(nullptr), cudaErrorInvalidValue);
  for (cudaStream_t ok : {cudaStream_t{}, cudaStreamLegacy, cudaStreamPerThread, s, nb})
    EXPECT_EQ(cudaStreamSynchronize(ok), cudaSuccess);
  auto const bogus = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1234});
  EXPECT_EQ(cudaStreamSynchronize(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nb), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaDouble, PoolCreateValidatesProperties) {
  cudaMemPool_t pool = nullptr;
  auto props = device_pool_props(0);
  EXPECT_EQ(cudaMemPoolCreate(nullptr, &props), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPoolCreate(&pool, nullptr), cudaErrorInvalidValue);
  props.allocType = cudaMemAllocationTypeInvalid;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props = device_pool_props(devices_);
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props = device_pool_props(0);
  props.location.type = cudaMemLocationTypeHost;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue);
  props = device_pool_props(0, cudaMemHandleTypeWin32);
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaErrorNotSupported);

  for (auto handles : {cudaMemHandleTypeNone, cudaMemHandleTypePosixFileDescriptor,
                       static_cast<cudaMemAllocationHandleType>(cudaMemHandleTypePosixFileDescriptor |
                                                                cudaMemHandleTypeFabric)}) {
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

TEST_F(CudaDouble, PoolAccounting) {
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

TEST_F(CudaDouble, PoolCallErrors) {
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

TEST_F(CudaDouble, MallocAsyncUsesTheDefaultPool) {
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

TEST_F(CudaDouble, DestroyingAPoolFreesItsAllocations) {
  std::size_t const free0 = free_memory();
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* p[3] = {};
  for (auto& q : p) ASSERT_EQ(cudaMallocFromPoolAsync(&q, MiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(cuda_double_live_allocations(), live_ + 3);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cuda_double_live_allocations(), live_);
  EXPECT_EQ(free_memory(), free0);
  EXPECT_EQ(cuda_double_pointer_kind(p[0]), 0);
  EXPECT_EQ(cudaFree(p[0]), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeAsync(p[1], nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p[0], 16, pool, nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, SynchronizationTrimsOnlyThatDevicesPools) {
  if (devices_ < 2) GTEST_SKIP() << "one device";
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

TEST_F(CudaDouble, ManyThreads) {
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
        if (i % 100 == 0) {
          ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        }
      }
      ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.native_mallocs, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.native_frees, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.pool_allocs, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.pool_frees, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.failed_calls, 0u);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(CudaDouble, ResetCounters) {
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 16, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFree(&p), cudaErrorInvalidValue);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamLegacy);
  cuda_double_reset_counters();
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.native_mallocs + c.native_frees + c.pool_allocs + c.pool_frees + c.pools_created +
                c.pools_destroyed + c.failed_calls,
            0u);
  EXPECT_EQ(cuda_double_last_alloc_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cuda_double_last_free_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // not a counter
}

// ------------------------------------------------------------ CudaDouble: the driver double

// The driver double's own definition of an exported symbol (what its
// cuGetProcAddress must hand out), found through the loaded libcuda.so.1.
void* driver_symbol(char const* name) {
  static void* const handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  return handle == nullptr ? nullptr : dlsym(handle, name);
}

void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
CUdeviceptr as_deviceptr(void const* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

CUcontext primary_context(int device) {
  CUcontext c = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&c, device), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(device), CUDA_SUCCESS);
  return c;
}

CUcontext current_context() {
  CUcontext c = reinterpret_cast<CUcontext>(std::uintptr_t{1});
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  return c;
}

CUmemPoolProps driver_pool_props(int device, CUmemAllocationHandleType handles = CU_MEM_HANDLE_TYPE_NONE) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = handles;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  return props;
}

std::uint64_t driver_pool_attr(CUmemoryPool pool, CUmemPool_attribute attr) {
  std::uint64_t value = ~0ULL;
  EXPECT_EQ(cuMemPoolGetAttribute(pool, attr, &value), CUDA_SUCCESS);
  return value;
}

std::size_t driver_free_memory() {
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  return free;
}

TEST_F(CudaDouble, DriverIsTheDoubleLoadedWithTheRuntime) {
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

TEST_F(CudaDouble, DriverDeviceQueries) {
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

TEST_F(CudaDouble, DriverErrorNamesAndStrings) {
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

TEST_F(CudaDouble, DriverContextStackIsPerThread) {
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

TEST_F(CudaDouble, RuntimeCallsMakeTheRuntimeDevicesContextCurrent) {
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

    if (devices_ < 2) return;
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

TEST_F(CudaDouble, DriverMemAllocAndFree) {
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

TEST_F(CudaDouble, MemoryCanBeFreedThroughTheOtherLibrary) {
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

TEST_F(CudaDouble, DriverMemcpyAndMemset) {
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

  EXPECT_EQ(cuMemsetD8_v2(d + 60, 0, 5), CUDA_ERROR_INVALID_VALUE);  // runs past the end
  EXPECT_EQ(cuMemsetD8_v2(as_deviceptr(h), 0, 4), CUDA_ERROR_INVALID_VALUE);  // host memory
  EXPECT_EQ(cuMemcpyDtoH_v2(h, d + 32, 33), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(as_deviceptr(h), back, 4), CUDA_ERROR_INVALID_VALUE);  // not device memory
  EXPECT_EQ(cuMemcpyDtoH_v2(nullptr, d, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(d, nullptr, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(0, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

TEST_F(CudaDouble, DriverPointerAttributes) {
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

TEST_F(CudaDouble, DriverPools) {
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
  for (CUstream special : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD})
    EXPECT_EQ(cuStreamDestroy_v2(special), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(driver_free_memory(), free0);

  auto const counters = cuda_double_get_counters();
  EXPECT_EQ(counters.pools_created, 1u);
  EXPECT_EQ(counters.pools_destroyed, 1u);
  EXPECT_EQ(counters.pool_allocs, 3u);
  EXPECT_EQ(counters.pool_frees, 2u);
}

TEST_F(CudaDouble, DriverMallocAsyncUsesTheStreamsDevicesDefaultPool) {
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
  if (devices_ < 2) return;
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

TEST_F(CudaDouble, DriverPerThreadStreamEntryPoints) {
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

// cuGetProcAddress_v2 for one name; checks the status it reports.
void* proc(char const* name, int version = 13000, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT,
           CUresult expected = CUDA_SUCCESS,
           CUdriverProcAddressQueryResult expected_status = CU_GET_PROC_ADDRESS_SUCCESS) {
  void* pfn = reinterpret_cast<void*>(std::uintptr_t{1});
  auto status = static_cast<CUdriverProcAddressQueryResult>(-1);
  EXPECT_EQ(cuGetProcAddress_v2(name, &pfn, version, flags, &status), expected) << name << " " << version;
  EXPECT_EQ(status, expected_status) << name << " " << version;
  if (expected != CUDA_SUCCESS) {
    EXPECT_EQ(pfn, nullptr) << name;
  }
  return pfn;
}

TEST_F(CudaDouble, GetProcAddressHandsOutTheDoublesOwnFunctions) {
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
      {"cuCtxSynchronize", "cuCtxSynchronize"},
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
  for (char const* base : {"cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuStreamSynchronize",
                           "cuStreamQuery", "cuStreamWaitEvent", "cuStreamGetFlags", "cuEventRecord",
                           "cuStreamEndCapture", "cuStreamIsCapturing"}) {
    std::string const ptsz = std::string(base) + "_ptsz";
    ASSERT_NE(driver_symbol(ptsz.c_str()), nullptr) << ptsz;
    EXPECT_EQ(proc(base, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), driver_symbol(ptsz.c_str())) << base;
  }
  EXPECT_EQ(proc("cuStreamBeginCapture", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            driver_symbol("cuStreamBeginCapture_v2_ptsz"));
  // Those without a _ptsz variant ignore the flag.
  for (char const* base : {"cuStreamCreateWithPriority", "cuEventQuery", "cuEventSynchronize", "cuCtxSynchronize"})
    EXPECT_EQ(proc(base, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), driver_symbol(base)) << base;
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

TEST_F(CudaDouble, GetProcAddressVersionsAndTheLegacyAbi) {
  // cuMemAlloc's _v2 ABI is that of CUDA 3.2; the older one is not provided.
  EXPECT_EQ(proc("cuMemAlloc", 3020), driver_symbol("cuMemAlloc_v2"));
  proc("cuMemAlloc", 3010, CU_GET_PROC_ADDRESS_DEFAULT, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
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
  // The other new names, just below and at their first version.
  struct since_row {
    char const* base;
    int version;
    char const* symbol;
  };
  since_row const since[] = {
      {"cuEventDestroy", 4000, "cuEventDestroy_v2"},
      {"cuDevicePrimaryCtxReset", 11000, "cuDevicePrimaryCtxReset_v2"},
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

TEST_F(CudaDouble, GetProcAddressUnknownNamesAndBadArguments) {
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

TEST_F(CudaDouble, GetProcAddressCountsLookupsByName) {
  EXPECT_EQ(cuda_double_proc_lookups("cuMemAlloc"), 0u);  // SetUp reset the counters
  void* pfn = nullptr;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 13000, 0, nullptr), CUDA_SUCCESS);
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

TEST_F(CudaDouble, DriverCountersAreResetWithTheOthers) {
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

// ------------------------------------------------------------ CudaDouble: streams, events, capture, reset

// Sets the calling thread's capture mode (driver API) for its lifetime.
class capture_mode_scope {
 public:
  explicit capture_mode_scope(CUstreamCaptureMode mode) : previous_(mode) {
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&previous_), CUDA_SUCCESS);
  }
  ~capture_mode_scope() { EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&previous_), CUDA_SUCCESS); }
  capture_mode_scope(capture_mode_scope const&) = delete;
  capture_mode_scope& operator=(capture_mode_scope const&) = delete;

 private:
  CUstreamCaptureMode previous_;
};

CUstreamCaptureStatus capture_status(CUstream s) {
  auto status = static_cast<CUstreamCaptureStatus>(-1);
  EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  return status;
}

std::size_t graph_node_count(CUgraph g) {
  std::size_t n = ~std::size_t{0};
  EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_SUCCESS);
  return n;
}

CUstream new_stream(unsigned flags = CU_STREAM_DEFAULT) {
  CUstream s = nullptr;
  EXPECT_EQ(cuStreamCreate(&s, flags), CUDA_SUCCESS);
  return s;
}

CUevent new_event(unsigned flags = CU_EVENT_DEFAULT) {
  CUevent e = nullptr;
  EXPECT_EQ(cuEventCreate(&e, flags), CUDA_SUCCESS);
  return e;
}

char const* const mode_names[] = {"global", "thread-local", "relaxed"};
CUstreamCaptureMode const modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                      CU_STREAM_CAPTURE_MODE_RELAXED};

TEST_F(CudaDouble, DriverStreamsWithPriorityFlagsQueryAndTheOldDestroy) {
  CUstream s = nullptr, nb = nullptr;
  ASSERT_EQ(cuStreamCreateWithPriority(&s, CU_STREAM_DEFAULT, -100), CUDA_SUCCESS);  // clamped, not refused
  ASSERT_EQ(cuStreamCreateWithPriority(&nb, CU_STREAM_NON_BLOCKING, 3), CUDA_SUCCESS);
  CUstream bad = nullptr;
  EXPECT_EQ(cuStreamCreateWithPriority(&bad, 0x10, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreateWithPriority(nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  unsigned flags = 99;
  EXPECT_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cuStreamGetFlags(nb, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_STREAM_NON_BLOCKING});
  for (CUstream special : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    flags = 99;
    EXPECT_EQ(cuStreamGetFlags(special, &flags), CUDA_SUCCESS);
    EXPECT_EQ(flags, 0u);
  }
  EXPECT_EQ(cuStreamGetFlags_ptsz(nullptr, &flags), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamGetFlags(s, nullptr), CUDA_ERROR_INVALID_VALUE);
  auto const bogus = reinterpret_cast<CUstream>(std::uintptr_t{0x1234});
  EXPECT_EQ(cuStreamGetFlags(bogus, &flags), CUDA_ERROR_INVALID_HANDLE);

  // cuStreamQuery: everything is complete, and it is no synchronization event.
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 100, nb), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, nb), CUDA_SUCCESS);
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery_ptsz(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(bogus), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * MiB);
  EXPECT_EQ(cuStreamSynchronize(nb), CUDA_SUCCESS);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);

  // The CUDA 2.0 cuStreamDestroy and cuStreamDestroy_v2 are the same.
  EXPECT_EQ(cuStreamDestroy_v1(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v1(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v1(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamGetFlags(nb, &flags), CUDA_ERROR_INVALID_HANDLE);

  std::thread([] {  // no current context
    CUstream t = nullptr;
    EXPECT_EQ(cuStreamCreateWithPriority(&t, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    unsigned f = 0;
    EXPECT_EQ(cuStreamGetFlags(CU_STREAM_LEGACY, &f), CUDA_ERROR_INVALID_CONTEXT);
    CUevent e = nullptr;
    EXPECT_EQ(cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  }).join();

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, 2u);
  EXPECT_EQ(c.streams_destroyed, 2u);
  EXPECT_EQ(c.stream_synchronizes, 1u);
  EXPECT_EQ(c.failed_calls, 13u);
}

TEST_F(CudaDouble, RuntimeStreamsReachTheDriver) {
  cudaStream_t s = nullptr, nb = nullptr, prio = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&prio, cudaStreamNonBlocking, -1), cudaSuccess);
  cudaStream_t bad = nullptr;
  EXPECT_EQ(cudaStreamCreateWithPriority(&bad, 0x10, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  unsigned flags = 99;
  EXPECT_EQ(cudaStreamGetFlags(prio, &flags), cudaSuccess);
  EXPECT_EQ(flags, unsigned{cudaStreamNonBlocking});
  EXPECT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(cudaStreamGetFlags(nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nb), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto const bogus = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x1234});
  EXPECT_EQ(cudaStreamQuery(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  for (cudaStream_t x : {s, nb, prio}) EXPECT_EQ(cudaStreamDestroy(x), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, 3u);  // counted by the driver functions the runtime called
  EXPECT_EQ(c.streams_destroyed, 3u);
  EXPECT_EQ(c.stream_synchronizes, 1u);
  EXPECT_EQ(c.context_synchronizes, 1u);
  // A runtime call that failed in the driver counts once, not twice.
  EXPECT_EQ(c.failed_calls, 4u);
}

TEST_F(CudaDouble, DriverEvents) {
  CUevent e = nullptr, timing_off = nullptr, ipc = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&timing_off, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUevent bad = nullptr;
  EXPECT_EQ(cuEventCreate(&bad, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);  // needs DISABLE_TIMING
  EXPECT_EQ(cuEventCreate(&bad, 0x8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);

  // Complete before the first record, and as soon as recorded.
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  CUstream s = new_stream();
  for (CUstream where : {CUstream{}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, s})
    EXPECT_EQ(cuEventRecord(e, where), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord_ptsz(timing_off, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);

  EXPECT_EQ(cuda_double_last_wait_stream(), CUDA_DOUBLE_NO_STREAM);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), s);
  EXPECT_EQ(cuStreamWaitEvent_ptsz(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), CU_STREAM_PER_THREAD);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), nullptr);
  EXPECT_EQ(cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL), CUDA_ERROR_INVALID_VALUE);  // only in a capture
  EXPECT_EQ(cuStreamWaitEvent(s, e, 2), CUDA_ERROR_INVALID_VALUE);

  auto const bogus_stream = reinterpret_cast<CUstream>(std::uintptr_t{0x1234});
  auto const bogus_event = reinterpret_cast<CUevent>(std::uintptr_t{0x1234});
  EXPECT_EQ(cuEventRecord(e, bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(bogus_event, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(nullptr, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamWaitEvent(s, bogus_event, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(bogus_event), CUDA_ERROR_INVALID_HANDLE);

  std::thread([&] {  // destroying, querying and synchronizing need no context
    EXPECT_EQ(cuEventSynchronize(timing_off), CUDA_SUCCESS);
    EXPECT_EQ(cuEventDestroy_v2(timing_off), CUDA_SUCCESS);
    EXPECT_EQ(cuEventRecord(e, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  }).join();
  EXPECT_EQ(cuEventDestroy_v2(timing_off), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(ipc), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);

  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.events_recorded, 5u);
  EXPECT_EQ(c.stream_waits, 3u);
  EXPECT_EQ(c.captured_operations, 0u);
  EXPECT_EQ(c.failed_calls, 17u);
}

TEST_F(CudaDouble, EventsAcrossDevices) {
  if (devices_ < 2) GTEST_SKIP() << "one device";
  CUstream s0 = new_stream();  // device 0 (SetUp made its context current)
  ASSERT_EQ(cuCtxSetCurrent(primary_context(1)), CUDA_SUCCESS);
  CUevent e1 = new_event();  // device 1
  CUstream s1 = new_stream();
  EXPECT_EQ(cuEventRecord(e1, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e1, nullptr), CUDA_SUCCESS);  // device 1's legacy stream
  EXPECT_EQ(cuEventRecord(e1, s0), CUDA_ERROR_INVALID_HANDLE);  // event and stream of different devices
  ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e1, nullptr), CUDA_ERROR_INVALID_HANDLE);  // now device 0's legacy stream
  EXPECT_EQ(cuEventRecord(e1, CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
  // A stream may wait on an event of another device (cuda.h says so).
  EXPECT_EQ(cuStreamWaitEvent(s0, e1, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, e1, 0), CUDA_SUCCESS);
  // The runtime: an event of device 0 recorded on a device-1 stream.
  cudaEvent_t e0 = nullptr;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(s1, e0, 0), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e0), cudaSuccess);
  EXPECT_EQ(cuEventDestroy_v2(e1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.events_recorded, 2u);
  EXPECT_EQ(c.stream_waits, 3u);
  EXPECT_EQ(c.failed_calls, 4u);
}

TEST_F(CudaDouble, RuntimeEventsReachTheDriver) {
  cudaEvent_t e = nullptr, f = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&f, cudaEventDisableTiming), cudaSuccess);
  cudaEvent_t bad = nullptr;
  EXPECT_EQ(cudaEventCreateWithFlags(&bad, cudaEventInterprocess), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreate(nullptr), cudaErrorInvalidValue);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(f, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(f), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(cudaStreamPerThread, e, 0), cudaSuccess);
  EXPECT_EQ(cuda_double_last_wait_stream(), cudaStreamPerThread);
  EXPECT_EQ(cudaStreamWaitEvent(s, e, cudaEventWaitExternal), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(f), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.events_recorded, 2u);
  EXPECT_EQ(c.stream_waits, 1u);
  EXPECT_EQ(c.failed_calls, 5u);  // once per failing runtime call
}

TEST_F(CudaDouble, DriverCaptureTurnsWorkIntoNodes) {
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUstream s = new_stream();
  CUstream nb = new_stream(CU_STREAM_NON_BLOCKING);
  CUevent e = new_event();
  CUdeviceptr outside = 0;  // allocated before the capture
  ASSERT_EQ(cuMemAllocAsync(&outside, 64, s), CUDA_SUCCESS);

  // What cannot be captured, and bad arguments.
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, static_cast<CUstreamCaptureMode>(3)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCapture_v2(reinterpret_cast<CUstream>(std::uintptr_t{0x1234}),
                                    CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_HANDLE);
  CUgraph g = reinterpret_cast<CUgraph>(std::uintptr_t{1});
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(capture_status(CU_STREAM_LEGACY), CU_STREAM_CAPTURE_STATUS_NONE);

  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuda_double_stream_is_capturing(s), 1);
  EXPECT_EQ(capture_status(nb), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamIsCapturing(s, nullptr), CUDA_ERROR_INVALID_VALUE);
  // The legacy stream while a blocking stream captures: IMPLICIT, nothing invalidated.
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(nullptr, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);

  // Work on the capturing stream becomes nodes; none of it runs.
  std::size_t const live_before = static_cast<std::size_t>(cuda_double_live_allocations());
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, 100, s), CUDA_SUCCESS);  // 1
  ASSERT_NE(a, 0u);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 2);  // usable, a fresh pool allocation
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(a)), default_pool);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, 64, default_pool, s), CUDA_SUCCESS);  // 2
  EXPECT_EQ(cuda_double_last_alloc_stream(), s);
  EXPECT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);                        // 3
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);                 // 4
  EXPECT_EQ(cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);  // 5
  EXPECT_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);                       // 6: frees nothing
  EXPECT_EQ(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);           // not twice in one capture
  EXPECT_EQ(cuMemFreeAsync(outside, s), CUDA_SUCCESS);                 // 7: frees nothing either
  EXPECT_EQ(cuda_double_last_free_stream(), s);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 2);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(outside)), 2);
  EXPECT_EQ(static_cast<std::size_t>(cuda_double_live_allocations()), live_before + 2);
  // Work on other streams runs as usual.
  CUdeviceptr c = 0;
  ASSERT_EQ(cuMemAllocAsync(&c, 16, nb), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(c, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(c)), 0);
  auto counters = cuda_double_get_counters();
  EXPECT_EQ(counters.captures_begun, 1u);
  EXPECT_EQ(counters.captured_operations, 7u);
  EXPECT_EQ(counters.pool_allocs, 2u);  // outside and c, not the captured ones
  EXPECT_EQ(counters.pool_frees, 1u);
  EXPECT_EQ(counters.events_recorded, 0u);
  EXPECT_EQ(counters.stream_waits, 0u);
  EXPECT_EQ(counters.free_async_blocking_stream, 2u);  // captured frees are calls too
  EXPECT_EQ(counters.free_async_non_blocking_stream, 1u);

  EXPECT_EQ(cuStreamEndCapture(s, nullptr), CUDA_ERROR_INVALID_VALUE);
  g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuda_double_stream_is_capturing(s), 0);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(capture_status(CU_STREAM_LEGACY), CU_STREAM_CAPTURE_STATUS_NONE);

  // The graph: its nodes, as cuda.h describes cuGraphGetNodes.
  EXPECT_EQ(graph_node_count(g), 7u);
  CUgraphNode nodes[9];
  std::size_t n = 9;
  ASSERT_EQ(cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 7u);
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_NE(nodes[i], nullptr);
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(nodes[i], nodes[j]);
  }
  EXPECT_EQ(nodes[7], nullptr);
  EXPECT_EQ(nodes[8], nullptr);
  n = 2;
  ASSERT_EQ(cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(cuGraphGetNodes(g, nodes, nullptr), CUDA_ERROR_INVALID_VALUE);

  // The captured allocations are the graph's: they go with it. The capture
  // freed nothing, so `outside` is still the program's to free.
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(a)), 0);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(b)), 0);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(outside)), 2);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(outside, s), CUDA_SUCCESS);

  // e was last recorded in the capture.
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuStreamWaitEvent(nb, e, 0), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuEventRecord(e, nb), CUDA_SUCCESS);  // recorded outside again
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);

  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
  counters = cuda_double_get_counters();
  EXPECT_EQ(counters.captures_invalidated, 0u);
  EXPECT_EQ(counters.events_recorded, 1u);
}

TEST_F(CudaDouble, CaptureModesOnTheCapturingThread) {
  // A potentially unsafe call (cuMemAlloc_v2) on the thread that captures:
  // prohibited unless the capture or the thread is relaxed.
  CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
  int invalidated = 0;
  for (int cm = 0; cm < 3; ++cm) {
    for (int tm = 0; tm < 3; ++tm) {
      SCOPED_TRACE(std::string("capture ") + mode_names[cm] + ", thread " + mode_names[tm]);
      bool const prohibited = cm != CU_STREAM_CAPTURE_MODE_RELAXED && tm != CU_STREAM_CAPTURE_MODE_RELAXED;
      ASSERT_EQ(cuStreamBeginCapture_v2(s, modes[cm]), CUDA_SUCCESS);
      int const live = cuda_double_live_allocations();
      {
        capture_mode_scope mode(modes[tm]);
        CUdeviceptr p = 0;
        if (prohibited) {
          EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
          EXPECT_EQ(cuda_double_live_allocations(), live);  // nothing done
          ++invalidated;
        } else {
          ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
          EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
        }
      }
      EXPECT_EQ(capture_status(s), prohibited ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE);
      // Work for an invalidated capture is refused.
      CUdeviceptr q = 0;
      EXPECT_EQ(cuMemAllocAsync(&q, 16, s), prohibited ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
      CUgraph g = reinterpret_cast<CUgraph>(std::uintptr_t{1});
      if (prohibited) {
        EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        EXPECT_EQ(g, nullptr);
      } else {
        ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
        EXPECT_EQ(graph_node_count(g), 1u);
        EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
      }
      EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_NONE);
      EXPECT_EQ(cuda_double_live_allocations(), live);
    }
  }
  EXPECT_EQ(invalidated, 4);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_begun, 9u);
  EXPECT_EQ(c.captures_invalidated, 4u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaDouble, CaptureModesOfOtherThreads) {
  // A capture on this thread; a potentially unsafe call on another thread is
  // prohibited only when both the capture and that thread are in global mode.
  CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
  CUcontext const c0 = primary_context(0);
  for (int cm = 0; cm < 3; ++cm) {
    for (int tm = 0; tm < 3; ++tm) {
      SCOPED_TRACE(std::string("capture ") + mode_names[cm] + ", other thread " + mode_names[tm]);
      bool const prohibited = cm == CU_STREAM_CAPTURE_MODE_GLOBAL && tm == CU_STREAM_CAPTURE_MODE_GLOBAL;
      ASSERT_EQ(cuStreamBeginCapture_v2(s, modes[cm]), CUDA_SUCCESS);
      std::thread([&] {
        ASSERT_EQ(cuCtxSetCurrent(c0), CUDA_SUCCESS);
        capture_mode_scope mode(modes[tm]);
        CUdeviceptr p = 0;
        if (prohibited) {
          EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
          EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        } else {
          ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
          EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
          EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
        }
      }).join();
      CUgraph g = nullptr;
      EXPECT_EQ(cuStreamEndCapture(s, &g), prohibited ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
      if (g != nullptr) {
        EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
      }
    }
  }
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_invalidated, 1u);
  EXPECT_EQ(c.context_synchronizes, 8u);

  // The other way round: another thread's global capture prohibits this
  // (global) thread's unsafe call, and is what gets invalidated.
  CUstream t = new_stream(CU_STREAM_NON_BLOCKING);
  std::promise<void> begun, checked;
  std::thread other([&] {
    EXPECT_EQ(cuStreamBeginCapture_v2(t, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    begun.set_value();
    checked.get_future().wait();
    CUgraph g = reinterpret_cast<CUgraph>(std::uintptr_t{1});
    EXPECT_EQ(cuStreamEndCapture(t, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(g, nullptr);
  });
  begun.get_future().wait();
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuda_double_stream_is_capturing(t), 2);
  {
    capture_mode_scope local(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);  // other threads ignored
    ASSERT_EQ(cuMemAlloc_v2(&p, 16), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  checked.set_value();
  other.join();
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(t), CUDA_SUCCESS);
}

TEST_F(CudaDouble, EveryPotentiallyUnsafeCallIsProhibitedInAGlobalCapture) {
  CUstream capturing = new_stream(CU_STREAM_NON_BLOCKING);  // non-blocking: no IMPLICIT
  CUstream other = new_stream();
  CUevent e = new_event();
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUdeviceptr dp = 0, pp = 0;
  ASSERT_EQ(cuMemAlloc_v2(&dp, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&pp, 64, other), CUDA_SUCCESS);
  void* rp = nullptr;
  ASSERT_EQ(cudaMalloc(&rp, 64), cudaSuccess);

  struct call_case {
    char const* what;
    std::function<int()> call;  // a CUresult or a cudaError_t
    int prohibited;              // what it returns then
  };
  CUdeviceptr out = 0;
  void* rout = nullptr;
  int const unsupported = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int const rt_unsupported = cudaErrorStreamCaptureUnsupported;
  std::vector<call_case> const calls = {
      {"cuMemAlloc_v2", [&] { return int(cuMemAlloc_v2(&out, 16)); }, unsupported},
      {"cuMemFree_v2", [&] { return int(cuMemFree_v2(dp)); }, unsupported},
      {"cuCtxSynchronize", [&] { return int(cuCtxSynchronize()); }, unsupported},
      {"cuStreamSynchronize", [&] { return int(cuStreamSynchronize(other)); }, unsupported},
      {"cuStreamSynchronize_ptsz", [&] { return int(cuStreamSynchronize_ptsz(nullptr)); }, unsupported},
      {"cuStreamQuery", [&] { return int(cuStreamQuery(other)); }, unsupported},
      {"cuEventSynchronize", [&] { return int(cuEventSynchronize(e)); }, unsupported},
      {"cuEventQuery", [&] { return int(cuEventQuery(e)); }, unsupported},
      {"cuMemAllocAsync legacy", [&] { return int(cuMemAllocAsync(&out, 16, nullptr)); }, unsupported},
      {"cuMemAllocFromPoolAsync legacy",
       [&] { return int(cuMemAllocFromPoolAsync(&out, 16, default_pool, CU_STREAM_LEGACY)); }, unsupported},
      {"cuMemFreeAsync legacy", [&] { return int(cuMemFreeAsync(pp, nullptr)); }, unsupported},
      {"cuMemFreeAsync_ptsz legacy", [&] { return int(cuMemFreeAsync_ptsz(pp, CU_STREAM_LEGACY)); }, unsupported},
      {"cuEventRecord legacy", [&] { return int(cuEventRecord(e, nullptr)); }, unsupported},
      {"cudaMalloc", [&] { return int(cudaMalloc(&rout, 16)); }, rt_unsupported},
      {"cudaFree", [&] { return int(cudaFree(rp)); }, rt_unsupported},
      {"cudaDeviceSynchronize", [&] { return int(cudaDeviceSynchronize()); }, rt_unsupported},
      {"cudaStreamSynchronize", [&] { return int(cudaStreamSynchronize(other)); }, rt_unsupported},
      {"cudaStreamQuery", [&] { return int(cudaStreamQuery(nullptr)); }, rt_unsupported},
      {"cudaEventQuery", [&] { return int(cudaEventQuery(e)); }, rt_unsupported},
      {"cudaEventSynchronize", [&] { return int(cudaEventSynchronize(e)); }, rt_unsupported},
      {"cudaMallocAsync legacy", [&] { return int(cudaMallocAsync(&rout, 16, nullptr)); }, rt_unsupported},
      {"cudaMallocFromPoolAsync legacy",
       [&] { return int(cudaMallocFromPoolAsync(&rout, 16, default_pool, cudaStreamLegacy)); }, rt_unsupported},
      {"cudaFreeAsync legacy", [&] { return int(cudaFreeAsync(as_pointer(pp), cudaStreamLegacy)); }, rt_unsupported},
      {"cudaEventRecord legacy", [&] { return int(cudaEventRecord(e, nullptr)); }, rt_unsupported},
  };
  int const live = cuda_double_live_allocations();
  for (call_case const& call : calls) {
    SCOPED_TRACE(call.what);
    ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(call.call(), call.prohibited);
    EXPECT_EQ(capture_status(capturing), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_EQ(cuda_double_live_allocations(), live);  // nothing allocated or freed
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture(capturing, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // In relaxed mode the same call is allowed (the allocations are undone).
    ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    {
      capture_mode_scope relaxed(CU_STREAM_CAPTURE_MODE_RELAXED);
      out = 0;
      rout = nullptr;
      EXPECT_EQ(call.call(), 0);
    }
    ASSERT_EQ(cuStreamEndCapture(capturing, &g), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    if (out != 0) {
      EXPECT_EQ(cuMemFree_v2(out), CUDA_SUCCESS);
    }
    if (rout != nullptr) {
      EXPECT_EQ(cudaFree(rout), cudaSuccess);
    }
    if (cuda_double_pointer_kind(as_pointer(dp)) == 0) {
      ASSERT_EQ(cuMemAlloc_v2(&dp, 64), CUDA_SUCCESS);
    }
    if (cuda_double_pointer_kind(rp) == 0) {
      ASSERT_EQ(cudaMalloc(&rp, 64), cudaSuccess);
    }
    if (cuda_double_pointer_kind(as_pointer(pp)) == 0) {
      ASSERT_EQ(cuMemAllocAsync(&pp, 64, other), CUDA_SUCCESS);
    }
  }
  EXPECT_EQ(cuda_double_get_counters().captures_invalidated, calls.size());
  (void)cudaGetLastError();

  // Not potentially unsafe: stream-ordered work on other (non-legacy) streams,
  // events recorded there, waits, queries of the capture state.
  ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&out, 16, other), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(out, other), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync_ptsz(&out, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(out, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e, other), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(other, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(capture_status(other), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(capture_status(capturing), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(capturing, &g), CUDA_SUCCESS);
  EXPECT_EQ(graph_node_count(g), 0u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // A capturing stream itself can never be synchronized or queried.
  ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(capturing), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(capturing), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamSynchronize(capturing), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(capturing, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  EXPECT_EQ(cuMemFree_v2(dp), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(pp, other), CUDA_SUCCESS);
  EXPECT_EQ(cudaFree(rp), cudaSuccess);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(capturing), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(other), CUDA_SUCCESS);
}

TEST_F(CudaDouble, LegacyStreamCallsDuringABlockingCaptureAreImplicit) {
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  CUstream blocking = new_stream();
  CUstream nb = new_stream(CU_STREAM_NON_BLOCKING);
  CUevent e = new_event();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 64, nb), CUDA_SUCCESS);
  CUgraph g = nullptr;

  // A legacy-stream call, prohibited while a blocking stream of the device
  // captures: IMPLICIT; a call not on the legacy stream: UNSUPPORTED.
  auto const legacy_calls = std::vector<std::function<CUresult()>>{
      [&] { return cuMemAllocAsync(&p, 16, nullptr); },
      [&] { return cuMemAllocFromPoolAsync(&p, 16, default_pool, CU_STREAM_LEGACY); },
      [&] { return cuMemFreeAsync(p, CU_STREAM_LEGACY); },
      [&] { return cuEventRecord(e, nullptr); },
      [&] { return cuStreamSynchronize(nullptr); },
      [&] { return cuStreamQuery(CU_STREAM_LEGACY); },
  };
  for (std::size_t i = 0; i < legacy_calls.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(legacy_calls[i](), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT_EQ(capture_status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_EQ(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // A non-blocking capture: the same call is merely unsupported.
    ASSERT_EQ(cuStreamBeginCapture_v2(nb, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(legacy_calls[i](), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_EQ(cuStreamEndCapture(nb, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAlloc_v2(&q, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // not a legacy-stream call
  EXPECT_EQ(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // Not prohibited (relaxed thread): legacy-stream calls work normally.
  ASSERT_EQ(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  {
    capture_mode_scope relaxed(CU_STREAM_CAPTURE_MODE_RELAXED);
    ASSERT_EQ(cuMemAllocAsync(&q, 16, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeAsync(q, CU_STREAM_LEGACY), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(q)), 0);
  }
  ASSERT_EQ(cuStreamEndCapture(blocking, &g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // The per-thread default stream is blocking too.
  ASSERT_EQ(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocAsync(&q, 16, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(cuStreamEndCapture_ptsz(nullptr, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  if (devices_ >= 2) {
    // A blocking capture on device 1 makes device 0's legacy stream merely unsupported.
    ASSERT_EQ(cuCtxSetCurrent(primary_context(1)), CUDA_SUCCESS);
    CUstream b1 = new_stream();
    ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamBeginCapture_v2(b1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_SUCCESS);  // device 0's
    EXPECT_EQ(cuMemAllocAsync(&q, 16, nullptr), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_EQ(cuStreamEndCapture(b1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(cuStreamDestroy_v2(b1), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuMemFreeAsync(p, nb), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
}

TEST_F(CudaDouble, EndCaptureFromAnotherThread) {
  CUstream s = new_stream();
  for (int cm = 0; cm < 3; ++cm) {
    SCOPED_TRACE(mode_names[cm]);
    ASSERT_EQ(cuStreamBeginCapture_v2(s, modes[cm]), CUDA_SUCCESS);
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocAsync(&p, 16, s), CUDA_SUCCESS);
    bool const relaxed = modes[cm] == CU_STREAM_CAPTURE_MODE_RELAXED;
    CUgraph g = nullptr;
    std::thread([&] {
      EXPECT_EQ(cuStreamEndCapture(s, &g), relaxed ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    }).join();
    if (!relaxed) {
      EXPECT_EQ(g, nullptr);
      EXPECT_EQ(capture_status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);  // goes on
      ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    }
    EXPECT_EQ(graph_node_count(g), 1u);
    EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  }
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 2u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaDouble, PerThreadDefaultStreamCapture) {
  ASSERT_EQ(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuda_double_stream_is_capturing(CU_STREAM_PER_THREAD), 1);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing_ptsz(nullptr, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  std::thread([] {  // another thread's per-thread stream is another stream
    ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
    EXPECT_EQ(capture_status(CU_STREAM_PER_THREAD), CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT_EQ(cuda_double_stream_is_capturing(CU_STREAM_PER_THREAD), 0);
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocAsync_ptsz(&p, 16, nullptr), CUDA_SUCCESS);  // runs
    EXPECT_EQ(cuMemFreeAsync_ptsz(p, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture_ptsz(nullptr, &g), CUDA_ERROR_ILLEGAL_STATE);
  }).join();
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync_ptsz(&p, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync_ptsz(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 2);  // captured: not freed
  CUevent e = new_event();
  EXPECT_EQ(cuEventRecord_ptsz(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent_ptsz(nullptr, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_last_wait_stream(), CU_STREAM_PER_THREAD);
  EXPECT_EQ(cuStreamSynchronize_ptsz(nullptr), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture_ptsz(nullptr, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);  // an invalidated capture's memory goes at once
  // The plain entry points' null stream is the legacy stream.
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&p, 16, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g), CUDA_SUCCESS);
  EXPECT_EQ(graph_node_count(g), 1u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.free_async_per_thread_stream, 2u);
  EXPECT_EQ(c.captures_begun, 2u);
  EXPECT_EQ(c.captured_operations, 5u);
}

TEST_F(CudaDouble, CapturesEndWithTheirStreamAndDoNotMerge) {
  CUstream s1 = new_stream(), s2 = new_stream(), plain = new_stream();
  ASSERT_EQ(cuStreamBeginCapture_v2(s1, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s2, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUevent e = new_event();
  EXPECT_EQ(cuEventRecord(e, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
  EXPECT_EQ(cuStreamWaitEvent(s1, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(plain, e, 0), CUDA_ERROR_NOT_SUPPORTED);  // joining a capture: not modelled
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAllocAsync(&p, 16, s1), CUDA_SUCCESS);
  // Destroying a capturing stream ends its capture; its memory goes.
  EXPECT_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(s1, &st), CUDA_ERROR_INVALID_HANDLE);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s2, &g), CUDA_SUCCESS);
  EXPECT_EQ(graph_node_count(g), 0u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(plain, e, 0), CUDA_ERROR_CAPTURED_EVENT);  // its capture is over
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(plain), CUDA_SUCCESS);
}

TEST_F(CudaDouble, FreeAsyncCountedByKindOfStream) {
  CUstream blocking = new_stream(), nb = new_stream(CU_STREAM_NON_BLOCKING);
  auto const round = [](CUstream alloc_on, auto free) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAllocAsync(&p, 16, alloc_on), CUDA_SUCCESS);
    EXPECT_EQ(free(p), CUDA_SUCCESS);
  };
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync(p, nullptr); });                  // legacy
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync(p, CU_STREAM_LEGACY); });         // legacy
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync_ptsz(p, CU_STREAM_LEGACY); });    // legacy
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync_ptsz(p, nullptr); });             // per-thread
  round(nb, [](CUdeviceptr p) { return cuMemFreeAsync(p, CU_STREAM_PER_THREAD); });     // per-thread
  round(nb, [&](CUdeviceptr p) { return cuMemFreeAsync(p, blocking); });                // blocking
  round(nb, [&](CUdeviceptr p) { return cuMemFreeAsync_ptsz(p, nb); });                 // non-blocking
  void* r = nullptr;
  ASSERT_EQ(cudaMallocAsync(&r, 16, nb), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(r, nb), cudaSuccess);  // the runtime's: not counted by kind
  EXPECT_EQ(cuMemFreeAsync(0, nb), CUDA_ERROR_INVALID_VALUE);  // failures are not counted
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.free_async_legacy_stream, 3u);
  EXPECT_EQ(c.free_async_per_thread_stream, 2u);
  EXPECT_EQ(c.free_async_blocking_stream, 1u);
  EXPECT_EQ(c.free_async_non_blocking_stream, 1u);
  EXPECT_EQ(c.pool_frees, 8u);
  cuda_double_reset_counters();
  c = cuda_double_get_counters();
  EXPECT_EQ(c.free_async_legacy_stream + c.free_async_per_thread_stream + c.free_async_blocking_stream +
                c.free_async_non_blocking_stream,
            0u);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(nb), CUDA_SUCCESS);
}

TEST_F(CudaDouble, CaptureModeIsPerThread) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);  // the default
  std::thread([] {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);  // needs no context
    EXPECT_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
    cudaStreamCaptureMode rm = cudaStreamCaptureModeGlobal;
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&rm), cudaSuccess);  // the same mode for the runtime
    EXPECT_EQ(rm, cudaStreamCaptureModeThreadLocal);
  }).join();
  mode = static_cast<CUstreamCaptureMode>(3);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
  cudaStreamCaptureMode rm = cudaStreamCaptureModeGlobal;
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&rm), cudaSuccess);
  EXPECT_EQ(rm, cudaStreamCaptureModeRelaxed);  // unchanged by the refused calls
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST_F(CudaDouble, ThreadLocalCapturesOnManyThreads) {
  // Threads capturing in thread-local mode do not disturb each other, nor a
  // global-mode thread's potentially unsafe calls.
  constexpr int thread_count = 6;
  constexpr int iterations = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([] {
      ASSERT_EQ(cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
      CUstream s = new_stream(CU_STREAM_NON_BLOCKING);
      for (int i = 0; i < iterations; ++i) {
        ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
        CUdeviceptr p = 0;
        ASSERT_EQ(cuMemAllocAsync(&p, 64, s), CUDA_SUCCESS);
        ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
        CUgraph g = nullptr;
        ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
        ASSERT_EQ(graph_node_count(g), 2u);
        ASSERT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
      }
      ASSERT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    });
  }
  for (int i = 0; i < iterations; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cuMemAlloc_v2(&p, 64), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  for (auto& t : threads) t.join();
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_begun, std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.captured_operations, 2 * std::uint64_t{thread_count} * iterations);
  EXPECT_EQ(c.captures_invalidated, 0u);
  EXPECT_EQ(c.failed_calls, 0u);
}

TEST_F(CudaDouble, RuntimeCaptures) {
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, 0), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);

  // cudaMalloc while another stream of this thread captures in global mode:
  // unsupported, and the capture is invalidated (as on an H200).
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(cudaMallocAsync(&p, 16, s), cudaErrorStreamCaptureInvalidated);
  g = reinterpret_cast<cudaGraph_t>(std::uintptr_t{1});
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorStreamCaptureInvalidated);

  // cudaMallocFromPoolAsync on the legacy stream in the same situation: the same.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 256, default_pool, cudaStreamLegacy), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);

  // Both succeed in relaxed mode, the capture's or the thread's.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 256, default_pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 256, default_pool, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);

  // Stream-ordered work on the capturing stream: nodes; the free frees nothing.
  ASSERT_EQ(cudaMallocAsync(&p, 100, s), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);
  EXPECT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s, e, cudaEventWaitExternal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);  // invalidates it
  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorCapturedEvent);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 100, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  std::thread([&] {
    cudaGraph_t other = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &other), cudaErrorStreamCaptureWrongThread);
    EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureWrongThread);
  }).join();
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphNode_t nodes[2] = {};
  std::size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  EXPECT_EQ(n, 2u);
  n = 2;
  EXPECT_EQ(cudaGraphGetNodes(g, nodes, &n), cudaSuccess);
  EXPECT_NE(nodes[1], nullptr);
  EXPECT_EQ(cudaGraphGetNodes(g, nodes, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda_double_pointer_kind(p), 2);  // the graph's
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(cudaGraphDestroy(g), cudaErrorInvalidValue);

  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.captures_begun, 5u);
  EXPECT_EQ(c.captures_invalidated, 3u);
  EXPECT_EQ(c.failed_calls, 14u);  // every failing runtime call once
}

TEST_F(CudaDouble, PrimaryContextResetDestroysTheDevicesState) {
  int const d = devices_ - 1;  // with two devices, device 0 must be left alone
  ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
  CUcontext const ctx = current_context();
  std::size_t const total_free = free_memory();
  cudaMemPool_t default_pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&default_pool, d), cudaSuccess);

  // Something of every kind on device d.
  void* rt = nullptr;
  ASSERT_EQ(cudaMalloc(&rt, 1000), cudaSuccess);
  CUdeviceptr drv = 0, from_default = 0, from_created = 0, captured = 0;
  ASSERT_EQ(cuMemAlloc_v2(&drv, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&from_default, 3 * MiB, nullptr), CUDA_SUCCESS);
  std::uint64_t threshold = 64 * MiB;
  ASSERT_EQ(cuMemPoolSetAttribute(default_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  auto const props = driver_pool_props(d);
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&from_created, 1000, pool, nullptr), CUDA_SUCCESS);
  CUstream s = new_stream(), capturing = new_stream(CU_STREAM_NON_BLOCKING);
  CUevent e = new_event();
  ASSERT_EQ(cuStreamBeginCapture_v2(capturing, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&captured, 16, capturing), CUDA_SUCCESS);
  CUstream graph_stream = new_stream();  // a graph made before the reset stays valid
  ASSERT_EQ(cuStreamBeginCapture_v2(graph_stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(graph_stream, &g), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(graph_stream), CUDA_SUCCESS);
  // And something on device 0 when that is another device.
  CUdeviceptr other_device = 0;
  if (d != 0) {
    ASSERT_EQ(cuCtxPushCurrent_v2(primary_context(0)), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc_v2(&other_device, 64), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS);
  }
  int const live_before = cuda_double_live_allocations();

  EXPECT_EQ(cuDevicePrimaryCtxReset_v2(devices_), CUDA_ERROR_INVALID_DEVICE);
  std::thread([d] { EXPECT_EQ(cuDevicePrimaryCtxReset_v2(d), CUDA_SUCCESS); }).join();  // needs no context

  // Every allocation of the device is gone, whatever made it ...
  EXPECT_EQ(cuda_double_live_allocations(), live_before - 5);
  for (CUdeviceptr p : {as_deviceptr(rt), drv, from_default, from_created, captured})
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(p)), 0);
  EXPECT_EQ(cuMemFree_v2(drv), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaFree(rt), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemFreeAsync(from_default, CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_VALUE);
  // ... and so are its created pools, streams, events and captures.
  std::uint64_t value = 0;
  EXPECT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&p, 16, pool, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(capturing), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_ERROR_INVALID_HANDLE);
  // The default pool starts over; all the memory is free.
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0u);
  EXPECT_EQ(free_memory(), total_free);
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, total);
  // The graph stays.
  EXPECT_EQ(graph_node_count(g), 0u);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  // The context keeps its handle and is used again at once.
  EXPECT_EQ(current_context(), ctx);
  EXPECT_EQ(primary_context(d), ctx);
  ASSERT_EQ(cuMemAllocAsync(&p, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_pool(as_pointer(p)), default_pool);
  EXPECT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);  // leave device d's pool as found
  EXPECT_EQ(driver_pool_attr(default_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  if (d != 0) {
    EXPECT_EQ(cuda_double_pointer_kind(as_pointer(other_device)), 3);  // device 0: untouched
    EXPECT_EQ(cuMemFree_v2(other_device), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuda_double_get_counters().primary_context_resets, 1u);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_F(CudaDouble, DeviceResetResetsTheCurrentDevice) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), 0);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);  // the device is usable again
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  std::thread([this] {
    // No context current: the runtime device is reset, and nothing made current.
    void* q = nullptr;
    if (devices_ >= 2) {
      ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&q, 64), cudaSuccess);
      ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
    }
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(current_context(), nullptr);
    if (q != nullptr) {
      EXPECT_EQ(cuda_double_pointer_kind(q), 0);
    }
  }).join();
  auto const c = cuda_double_get_counters();
  EXPECT_EQ(c.primary_context_resets, 2u);
  EXPECT_EQ(c.failed_calls, 2u);
}

TEST_F(CudaDouble, NewCountersAreResetWithTheOthers) {
  CUstream s = new_stream();
  CUevent e = new_event();
  EXPECT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.streams_created, 1u);
  EXPECT_EQ(c.streams_destroyed, 1u);
  EXPECT_EQ(c.events_recorded, 1u);
  EXPECT_EQ(c.stream_waits, 1u);
  EXPECT_EQ(c.stream_synchronizes, 1u);
  EXPECT_EQ(c.context_synchronizes, 1u);
  EXPECT_EQ(c.captures_begun, 1u);
  EXPECT_EQ(c.captures_invalidated, 1u);
  EXPECT_EQ(c.captured_operations, 1u);
  EXPECT_EQ(cuda_double_last_wait_stream(), s);
  cuda_double_reset_counters();
  c = cuda_double_get_counters();
  unsigned long long const* const fields = &c.native_mallocs;
  for (std::size_t i = 0; i < sizeof c / sizeof *fields; ++i) EXPECT_EQ(fields[i], 0u) << "field " << i;
  EXPECT_EQ(cuda_double_last_wait_stream(), CUDA_DOUBLE_NO_STREAM);
}

// ------------------------------------------------------------ CudaDouble: peer access, pool access, exports, IPC
//
// These come last: the runtime keeps a retain of each peer device's primary
// context it used (cudaDeviceEnablePeerAccess), which the context tests above
// would otherwise see.

CUmemAccessDesc access_desc(int device, CUmemAccess_flags flags,
                            CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE) {
  CUmemAccessDesc desc{};
  desc.location.type = type;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

CUmemAccess_flags driver_pool_access(CUmemoryPool pool, int device) {
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  auto flags = static_cast<CUmemAccess_flags>(-1);
  EXPECT_EQ(cuMemPoolGetAccess(&flags, pool, &location), CUDA_SUCCESS);
  return flags;
}

// Pushes a device's primary context for its lifetime (driver API).
class context_scope {
 public:
  explicit context_scope(int device) { EXPECT_EQ(cuCtxPushCurrent_v2(primary_context(device)), CUDA_SUCCESS); }
  ~context_scope() { EXPECT_EQ(cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS); }
  context_scope(context_scope const&) = delete;
  context_scope& operator=(context_scope const&) = delete;
};

TEST_F(CudaDouble, DriverCanAccessPeer) {
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
  }).join();
  for (int d = 0; d < devices_; ++d)
    for (int peer = 0; peer < devices_; ++peer) {
      EXPECT_EQ(cuDeviceCanAccessPeer(&can, d, peer), CUDA_SUCCESS);
      EXPECT_EQ(can, d == peer ? 0 : 1) << d << " -> " << peer;  // every pair of distinct devices
    }
  EXPECT_EQ(cuda_double_get_counters().failed_calls, 4u);
}

TEST_F(CudaDouble, DriverPeerAccessRules) {
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
  }).join();
  auto c = cuda_double_get_counters();
  EXPECT_EQ(c.failed_calls, 10u);
  EXPECT_EQ(c.peer_access_enables + c.peer_access_disables, 0u);
  if (devices_ < 2) GTEST_SKIP() << "the rest needs two devices";

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
  EXPECT_EQ(cuda_double_can_access(1, native0), 0);               // one direction only
  EXPECT_EQ(cuda_double_can_access(2, native1), 0);               // no such device (or not a peer)
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

TEST_F(CudaDouble, RuntimePeerAccessReachesTheDriver) {
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
  if (devices_ < 2) GTEST_SKIP() << "the rest needs two devices";

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

TEST_F(CudaDouble, DriverPoolAccess) {
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
  for (auto const& bad : {access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READ),  // read-only: not for device memory
                          access_desc(devices_ > 1 ? 1 : 0, CU_MEM_ACCESS_FLAGS_PROT_READ),
                          access_desc(0, static_cast<CUmemAccess_flags>(2)),
                          access_desc(0, static_cast<CUmemAccess_flags>(7)),
                          access_desc(devices_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
                          access_desc(-1, CU_MEM_ACCESS_FLAGS_PROT_NONE),
                          access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_LOCATION_TYPE_HOST),
                          access_desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_LOCATION_TYPE_INVALID)})
    EXPECT_EQ(cuMemPoolSetAccess(pool, &bad, 1), CUDA_ERROR_INVALID_VALUE)
        << bad.location.type << " " << bad.location.id << " " << bad.flags;
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
  EXPECT_EQ(c.pool_access_sets, 2u);           // owner read-write, and count 0
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

TEST_F(CudaDouble, RuntimePoolAccessReachesTheDriver) {
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

TEST_F(CudaDouble, DriverPoolExports) {
  CUmemoryPool posix = nullptr, fabric = nullptr, both = nullptr, plain = nullptr;
  auto props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ASSERT_EQ(cuMemPoolCreate(&posix, &props), CUDA_SUCCESS);
  props = driver_pool_props(0, CU_MEM_HANDLE_TYPE_FABRIC);
  ASSERT_EQ(cuMemPoolCreate(&fabric, &props), CUDA_SUCCESS);
  props = driver_pool_props(0, static_cast<CUmemAllocationHandleType>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                                                                       CU_MEM_HANDLE_TYPE_FABRIC));
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
  }).join();
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
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, both,
                                             static_cast<CUmemAllocationHandleType>(
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC),
                                             0),
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
  }).join();
  EXPECT_EQ(cuMemPoolExportPointer(&da2, a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolExportPointer(&db, b), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(&da, &zero, sizeof da), 0);
  EXPECT_EQ(std::memcmp(&da, &da2, sizeof da), 0);  // the same allocation: the same data
  EXPECT_NE(std::memcmp(&da, &db, sizeof da), 0);
  CUmemPoolPtrExportData untouched{};
  for (CUdeviceptr bad : {a + 1, a + 256, from_plain, from_default, native, CUdeviceptr{0}})
    EXPECT_EQ(cuMemPoolExportPointer(&untouched, bad), CUDA_ERROR_INVALID_VALUE) << bad;
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
  for (CUmemoryPool pool : {posix, fabric, both, plain}) EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPoolExportToShareableHandle(&fd, posix, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);  // destroyed
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);  // leave the default pool as found
}

TEST_F(CudaDouble, RuntimePoolExportsReachTheDriver) {
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

TEST_F(CudaDouble, IpcMemHandles) {
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
  for (CUdeviceptr bad : {pooled, exportable, drv + 1, as_deviceptr(rt) + 256, CUdeviceptr{0}, CUdeviceptr{256}})
    EXPECT_EQ(cuIpcGetMemHandle(&untouched, bad), CUDA_ERROR_INVALID_VALUE) << bad;
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

// ------------------------------------------------------------ Defaults

TEST(Defaults, OneDeviceEightGiBFabricAndPosixHandles) {
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
bool driver_uninitialized() {
  int n = 0;
  return cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED;
}

TEST(DriverUninitialized, OnlyCuInitWorksBeforeCuInit) {
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

TEST(DriverUninitialized, TheRuntimeInitializesTheDriver) {
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
char const* const runtime_lookups[] = {
    "cuStreamCreate",     "cuStreamCreateWithPriority",        "cuStreamDestroy",     "cuStreamGetFlags",
    "cuStreamSynchronize", "cuStreamQuery",                     "cuStreamWaitEvent",   "cuEventCreate",
    "cuEventDestroy",     "cuEventRecord",                     "cuEventQuery",        "cuEventSynchronize",
    "cuStreamBeginCapture", "cuStreamEndCapture",              "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode", "cuGraphDestroy",     "cuGraphGetNodes",     "cuCtxSynchronize",
    "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxRetain",        "cuDeviceCanAccessPeer", "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess", "cuMemPoolSetAccess",               "cuMemPoolGetAccess",
    "cuMemPoolExportToShareableHandle", "cuMemPoolExportPointer", "cuIpcGetMemHandle", "cuMemGetInfo"};

bool runtime_lookups_are(unsigned long long expected) {
  for (char const* name : runtime_lookups)
    if (cuda_double_proc_lookups(name) != expected) return false;
  return true;
}

TEST(RuntimeLookups, TheRuntimeFetchesItsDriverEntryPointsOnceThroughGetProcAddress) {
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
  for (auto& t : threads) t.join();
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  for (char const* name : runtime_lookups) EXPECT_EQ(cuda_double_proc_lookups(name), 1u) << name;
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

void expect_unavailable(cudaError_t why) {
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

TEST(NoDevice, EverythingFailsWithNoDevice) {
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_DEVICES", "0"), "needs CUDA_DOUBLE_DEVICES=0 alone");
  expect_unavailable(cudaErrorNoDevice);
  int v = 0;
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
}

TEST(NoDriver, EverythingFailsWithInsufficientDriver) {
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_NO_DRIVER", "1"), "needs CUDA_DOUBLE_NO_DRIVER=1 alone");
  expect_unavailable(cudaErrorInsufficientDriver);
  int v = -1;
  EXPECT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 0);
}

TEST(NoDevice, DriverInitFailsWithNoDevice) {
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

TEST(NoDriver, TheDriverIsAStubLibrary) {
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

TEST(NoPools, PoolCallsAreNotSupported) {
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

TEST(NoPools, DriverPoolCallsAreNotSupported) {
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

TEST(SmallMemory, AccountingCoversMallocAndPoolReservations) {
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

TEST(SmallMemory, DriverAndRuntimeShareTheAccounting) {
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

TEST(HandleTypes, PoolsRefuseHandleTypesTheDeviceLacks) {
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

TEST(NoPeer, NoPairOfDevicesArePeers) {
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
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE);  // the flags first
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

TEST(FabricOk, FabricHandlesCanBeExported) {
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
  }).join();
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

}  // namespace
