// libasyncshim.so preloaded into a program linked against the CUDA test double.
// Each suite expects one environment (see tests/shim/CMakeLists.txt): the shim
// reads its settings once per process.
#include "cuda_double.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

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

constexpr std::size_t MiB = 1024 * 1024;
constexpr std::size_t GiB = 1024 * MiB;
constexpr std::size_t PiB = 1024 * 1024 * GiB;

enum pointer_kind { unknown = 0, native = 1, pool = 2 };

// The double's own cudaMalloc/cudaFree, bypassing the shim: "native" memory.
void* double_library()
{
  static void* handle = dlopen("libcudart_double.so", RTLD_LAZY | RTLD_NOLOAD);
  return handle;
}
cudaError_t native_malloc(void** p, std::size_t n)
{
  auto fn = reinterpret_cast<decltype(&cudaMalloc)>(dlsym(double_library(), "cudaMalloc"));
  return fn(p, n);
}

bool shim_is_preloaded()
{
  return dlsym(RTLD_DEFAULT, "cudaMalloc") != dlsym(double_library(), "cudaMalloc");
}

std::uint64_t pool_attribute(void const* ptr, cudaMemPoolAttr attribute)
{
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(cuda_double_pointer_pool(ptr), attribute, &value), cudaSuccess);
  return value;
}

std::string log_text()
{
  char const* path = std::getenv("ASYNCSHIM_LOG_FILE");
  if (path == nullptr) { return {}; }
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override
  {
    ASSERT_NE(double_library(), nullptr);
    ASSERT_TRUE(shim_is_preloaded()) << "run this test with LD_PRELOAD=libasyncshim.so";
    (void)cudaGetLastError();
  }
};

// ---- ASYNCSHIM_INITIAL_POOL_SIZE=64MiB ASYNCSHIM_RELEASE_THRESHOLD=1GiB CUDA_DOUBLE_DEVICES=2

using ShimRedirects = ShimTest;

TEST_F(ShimRedirects, CudaMallocComesFromThePoolOnTheLegacyStream)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);  // the pool exists (priming counts as a pool free)
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  auto const before = cuda_double_get_counters();
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamLegacy);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), unknown);
  EXPECT_EQ(cuda_double_last_free_stream(), cudaStreamLegacy);
  auto const after = cuda_double_get_counters();
  EXPECT_EQ(after.native_mallocs, before.native_mallocs);
  EXPECT_EQ(after.native_frees, before.native_frees);
  EXPECT_EQ(after.pool_frees, before.pool_frees + 1);
}

TEST_F(ShimRedirects, PoolHasTheConfiguredSettings)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReleaseThreshold), 1 * GiB);
  EXPECT_GE(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), 64 * MiB);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimRedirects, OnePoolPerDeviceCreatedLazily)
{
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&a, 100), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c, 100), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 100), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_pool(a), cuda_double_pointer_pool(c));
  EXPECT_NE(cuda_double_pointer_pool(a), cuda_double_pointer_pool(b));
  // Freeing device-0 memory while device 1 is current works and leaves device 1 current.
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  int current = -1;
  EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 1);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
  EXPECT_EQ(cudaFree(c), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_F(ShimRedirects, NativeEdgeCasesBehaveNatively)
{
  void* p = reinterpret_cast<void*>(0x1234);
  EXPECT_EQ(cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  int on_stack = 0;
  EXPECT_EQ(cudaFree(&on_stack), cudaErrorInvalidValue);
}

TEST_F(ShimRedirects, ForeignPointersGoToTheNativeFree)
{
  void* native_ptr = nullptr;
  ASSERT_EQ(native_malloc(&native_ptr, 4096), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(native_ptr), native);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cudaFree(native_ptr), cudaSuccess);
  EXPECT_EQ(cuda_double_get_counters().native_frees, before.native_frees + 1);
  EXPECT_EQ(cudaFree(native_ptr), cudaErrorInvalidValue);  // double free, as natively
}

TEST_F(ShimRedirects, DoubleFreeOfPoolMemoryIsInvalidValue)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 512), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
}

TEST_F(ShimRedirects, OnePebibyteIsMemoryAllocationAndTheProgramContinues)
{
  void* p = reinterpret_cast<void*>(0xdead00);
  EXPECT_EQ(cudaMalloc(&p, PiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);  // as a failed native cudaMalloc leaves it
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);  // as a native failure leaves it
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 1024), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimRedirects, ManyThreadsAllocateAndFreeEachOthersMemory)
{
  constexpr int threads = 16;
  constexpr int rounds = 300;
  std::vector<std::vector<void*>> made(threads);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 256 * (1 + (i + t) % 13)) != cudaSuccess || cuda_double_pointer_kind(p) != pool) {
          ++failures;
          continue;
        }
        std::memset(p, t, 256);  // the double's memory is host memory
        if (i % 2 == 0) {
          if (cudaFree(p) != cudaSuccess) { ++failures; }
        } else {
          made[t].push_back(p);
        }
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  workers.clear();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (void* p : made[(t + 1) % threads]) {
        if (static_cast<unsigned char*>(p)[0] != static_cast<unsigned char>((t + 1) % threads)) { ++failures; }
        if (cudaFree(p) != cudaSuccess) { ++failures; }
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

// ---- ASYNCSHIM_STREAM=per-thread

using ShimPerThreadStream = ShimTest;

TEST_F(ShimPerThreadStream, AllocatesAndFreesOnThePerThreadStream)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamPerThread);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cuda_double_last_free_stream(), cudaStreamPerThread);
}

// ---- no ASYNCSHIM_* variables: the seed's defaults

using ShimDefaults = ShimTest;

TEST_F(ShimDefaults, PoolIsPrimedWithHalfOfFreeMemoryAndThresholdIsTotal)
{
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);  // before the pool exists
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReleaseThreshold), total);
  EXPECT_GE(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), free / 2);
  EXPECT_LT(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), free / 2 + 4 * MiB);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// ---- ASYNCSHIM_RELEASE_THRESHOLD=lots ASYNCSHIM_LOG_FILE=...

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

// ---- ASYNCSHIM_DISABLE=1

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

// ---- ASYNCSHIM_EXPORT_HANDLE_TYPE=win32 (the double lists posix fd and fabric only)

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
  EXPECT_NE(log.find("device 0: cannot create the asyncshim pool: export handle type win32 is not supported"),
            std::string::npos)
    << log;
  EXPECT_EQ(log.find("cannot create"), log.rfind("cannot create")) << "said more than once:\n" << log;
}

// ---- ASYNCSHIM_LOG_LEVEL=info ASYNCSHIM_INITAL_POOL_SIZE=1G (sic) ASYNCSHIM_LOG_FILE=...

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

// ---- both levels: ASYNCSHIM_INITIAL_POOL_SIZE=0 (and ASYNCSHIM_INTERCEPT=driver for the second suite)

using ShimCrossLevel = ShimTest;

TEST_F(ShimCrossLevel, MemoryFromEitherLevelIsFreedThroughTheOther)
{
  void* runtime_ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&runtime_ptr, 4096), cudaSuccess);  // also makes a context current
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), pool);
  auto const before = cuda_double_get_counters();
  EXPECT_EQ(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(runtime_ptr)), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(runtime_ptr), unknown);
  EXPECT_EQ(cuda_double_get_counters().pool_frees, before.pool_frees + 1);

  CUdeviceptr driver_ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&driver_ptr, 8192), CUDA_SUCCESS);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), pool);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(driver_ptr)), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(reinterpret_cast<void*>(driver_ptr)), unknown);
  EXPECT_EQ(cuMemFree_v2(driver_ptr), CUDA_ERROR_INVALID_VALUE);  // a double free, as natively
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
