// selftest.cpp: tests of the CUDA runtime TEST DOUBLE itself (cuda_double.h).
//
// The double reads its environment controls once per process, so CMake runs
// this program once per configuration with a --gtest_filter; each suite skips
// itself when the process is not in the configuration it is about:
//   CudaDouble   a working runtime with pools (any number of devices >= 1)
//   Defaults     no CUDA_DOUBLE_* variable set at all
//   NoDevice     CUDA_DOUBLE_DEVICES=0
//   NoDriver     CUDA_DOUBLE_NO_DRIVER=1
//   NoPools      CUDA_DOUBLE_NO_POOLS=1
//   SmallMemory  CUDA_DOUBLE_MEMORY=16777216 (16 MiB), one device
//   HandleTypes  CUDA_DOUBLE_POOL_HANDLE_TYPES=1
// Under ctest CUDA_DOUBLE_SELFTEST_STRICT=1 turns those skips into failures, so
// that a configuration gone wrong cannot pass by skipping everything.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "cuda_double.h"

namespace {

constexpr std::size_t kMiB = 1ULL << 20;
constexpr std::size_t kPiB = 1ULL << 50;

char const* const kVars[] = {"CUDA_DOUBLE_DEVICES", "CUDA_DOUBLE_NO_DRIVER", "CUDA_DOUBLE_MEMORY",
                             "CUDA_DOUBLE_NO_POOLS", "CUDA_DOUBLE_POOL_HANDLE_TYPES"};

// True when exactly the given variable is set (to value) among the controls;
// with name == nullptr, when none is set.
bool only_env(char const* name = nullptr, char const* value = nullptr) {
  for (char const* var : kVars) {
    char const* v = std::getenv(var);
    if (name != nullptr && std::strcmp(var, name) == 0) {
      if (v == nullptr || std::strcmp(v, value) != 0) return false;
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
  EXPECT_EQ(cudaMalloc(&p, kPiB), cudaErrorMemoryAllocation);
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
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 2 * kMiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 1000u);
  EXPECT_EQ(free_memory(), free0 - 2 * kMiB);

  ASSERT_EQ(cudaMallocFromPoolAsync(&b, 3 * kMiB, pool, cudaStreamPerThread), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamPerThread);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 4 * kMiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * kMiB + 1000);
  EXPECT_EQ(free_memory(), free0 - 4 * kMiB);

  EXPECT_EQ(cudaFreeAsync(a, s2), cudaSuccess);
  EXPECT_EQ(cuda_double_last_free_stream(), s2);
  EXPECT_EQ(cudaFreeAsync(a, s2), cudaErrorInvalidValue);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 3 * kMiB);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 4 * kMiB);  // kept until a sync
  EXPECT_EQ(cudaFree(b), cudaSuccess);  // cudaFree of a pool pointer returns it to its pool
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrUsedMemHigh), 3 * kMiB + 1000);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemHigh), 4 * kMiB);
  EXPECT_EQ(free_memory(), free0 - 4 * kMiB);
  EXPECT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(free_memory(), free0);

  // A release threshold keeps memory reserved across synchronizations.
  std::uint64_t threshold = 8 * kMiB;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReleaseThreshold), 8 * kMiB);
  ASSERT_EQ(cudaMallocFromPoolAsync(&a, 5 * kMiB, pool, s1), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(a, s1), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 6 * kMiB);
  threshold = kMiB;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), kMiB);

  // High watermarks reset to the current values; only 0 may be set.
  std::uint64_t zero = 0, one = 1;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemHigh), kMiB);
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
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, kPiB, pool, s), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMallocAsync(&p, kPiB, s), cudaErrorMemoryAllocation);
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
  for (auto& q : p) ASSERT_EQ(cudaMallocFromPoolAsync(&q, kMiB, pool, nullptr), cudaSuccess);
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
  EXPECT_EQ(pool_attr(pool1, cudaMemPoolAttrReservedMemCurrent), 2 * kMiB);

  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(free_memory(), free0 - 2 * kMiB);
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
  constexpr int kThreads = 8;
  constexpr int kIterations = 2000;
  cudaMemPool_t pool = nullptr;
  auto const props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([pool, t] {
      cudaStream_t s = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      for (int i = 0; i < kIterations; ++i) {
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
  EXPECT_EQ(c.native_mallocs, std::uint64_t{kThreads} * kIterations);
  EXPECT_EQ(c.native_frees, std::uint64_t{kThreads} * kIterations);
  EXPECT_EQ(c.pool_allocs, std::uint64_t{kThreads} * kIterations);
  EXPECT_EQ(c.pool_frees, std::uint64_t{kThreads} * kIterations);
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

// ------------------------------------------------------------ SmallMemory

TEST(SmallMemory, AccountingCoversMallocAndPoolReservations) {
  REQUIRE_CONFIG(only_env("CUDA_DOUBLE_MEMORY", "16777216"), "needs CUDA_DOUBLE_MEMORY=16777216 alone");
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, 16 * kMiB);
  EXPECT_EQ(free, 16 * kMiB);

  void* all = nullptr;
  void* one = nullptr;
  ASSERT_EQ(cudaMalloc(&all, 16 * kMiB), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaFree(all), cudaSuccess);

  // Pool reservations count: freed pool memory stays reserved until a sync.
  cudaMemPool_t pool = nullptr;
  auto props = device_pool_props(0);
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 15 * kMiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 16 * kMiB);
  EXPECT_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&one, 1), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&one, kMiB), cudaSuccess);

  // 14 MiB + 1 more would need 16 MiB reserved (2 MiB steps) but only 15 MiB is left.
  EXPECT_EQ(cudaMallocFromPoolAsync(&p, 14 * kMiB + 1, pool, nullptr), cudaErrorMemoryAllocation);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 14 * kMiB, pool, nullptr), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);  // gives its reservation back
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, 15 * kMiB);
  ASSERT_EQ(cudaFree(one), cudaSuccess);

  // maxSize caps a pool's reservation.
  props.maxSize = 4 * kMiB;
  ASSERT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  void* q = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 3 * kMiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMallocFromPoolAsync(&q, 2 * kMiB, pool, nullptr), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMallocFromPoolAsync(&q, kMiB, pool, nullptr), cudaSuccess);
  EXPECT_EQ(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent), 4 * kMiB);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
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

}  // namespace
