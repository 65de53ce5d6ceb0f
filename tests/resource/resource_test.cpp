// cuda_async_memory_resource against the CUDA test double (host memory, no
// GPU). The same shape as RMM's resource tests: sizes from 0 to 1 GiB, a
// request that must fail as out-of-memory, alignment, distinct pointers,
// random and mixed patterns, threads, and RMM's defaults.
//
// The double reads its configuration once per process, so cases that need a
// different double (no pool support, other handle types) are separate CTest
// entries running this binary with a gtest filter and an environment.
#include "byte_literals.hpp"
#include "cuda_double.hpp"

#include <asyncshim/cuda_async_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace {

using asyncshim::cuda_async_memory_resource;
using handle_type = cuda_async_memory_resource::allocation_handle_type;

using byte_literals::GiB;
using byte_literals::KiB;
using byte_literals::MiB;
using byte_literals::PiB;

std::uint64_t attribute(cudaMemPool_t pool, cudaMemPoolAttr attr)
{
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &value), cudaSuccess);
  return value;
}

std::pair<std::size_t, std::size_t> memory_info()
{
  std::size_t free = 0;
  std::size_t total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return {free, total};
}

bool is_aligned(void const* p, std::size_t alignment) { return reinterpret_cast<std::uintptr_t>(p) % alignment == 0; }

// ---- construction and RMM's defaults --------------------------------------

TEST(ResourceDefaults, InitialPoolIsHalfOfFreeMemoryAndThresholdIsTotal)
{
  auto const [free, total] = memory_info();
  cuda_async_memory_resource mr;
  ASSERT_NE(mr.pool_handle(), nullptr);
  std::uint64_t const reserved = attribute(mr.pool_handle(), cudaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, free / 2);
  EXPECT_LT(reserved, free / 2 + 2 * MiB);  // the double rounds up to 2 MiB
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrReleaseThreshold), total);
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrUsedMemCurrent), 0U);  // primed, then freed
}

TEST(ResourceDefaults, ExplicitSizesAreUsed)
{
  cuda_async_memory_resource mr{1 * GiB, 2 * GiB};
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrReleaseThreshold), 2 * GiB);
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrReservedMemCurrent), 1 * GiB);
}

TEST(ResourceDefaults, ZeroInitialSizeDoesNotPrime)
{
  cuda_async_memory_resource mr{0, 2 * GiB};
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrReservedMemCurrent), 0U);
}

TEST(ResourceDefaults, PoolLivesOnTheCurrentDeviceWithRequestedHandleType)
{
  cuda_async_memory_resource mr{0, {}, handle_type::posix_file_descriptor};
  EXPECT_EQ(mr.device(), 0);
  auto const before = cuda_double_get_counters().pools_created;
  {
    cuda_async_memory_resource other{0};
  }
  EXPECT_EQ(cuda_double_get_counters().pools_created, before + 1);
}

TEST(ResourceDefaults, InitialSizeLargerThanTheDeviceIsOutOfMemory)
{
  auto const destroyed_before = cuda_double_get_counters().pools_destroyed;
  EXPECT_THROW(cuda_async_memory_resource{PiB}, asyncshim::out_of_memory);
  // The half-made pool is not leaked.
  EXPECT_EQ(cuda_double_get_counters().pools_destroyed, destroyed_before + 1);
}

TEST(ResourceDefaults, DestructorDestroysThePool)
{
  auto const before = cuda_double_get_counters().pools_destroyed;
  {
    cuda_async_memory_resource mr{0};
  }
  EXPECT_EQ(cuda_double_get_counters().pools_destroyed, before + 1);
}

TEST(ResourceCapabilities, UnsupportedExportHandleTypeIsALogicError)
{
  try {
    cuda_async_memory_resource mr{0, {}, handle_type::win32};
    FAIL() << "expected a logic_error";
  } catch (asyncshim::logic_error const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("win32"), std::string::npos) << what;
    EXPECT_NE(what.find("not supported by device 0"), std::string::npos) << what;
    EXPECT_NE(what.find("posix_file_descriptor, fabric"), std::string::npos) << what;
  }
}

// Run with CUDA_DOUBLE_NO_POOLS=1.
TEST(ResourceWithoutPools, MissingPoolSupportIsALogicError)
{
  try {
    cuda_async_memory_resource mr{0};
    FAIL() << "expected a logic_error";
  } catch (asyncshim::logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("cudaDevAttrMemoryPoolsSupported is 0"), std::string::npos) << e.what();
  }
}

// Run with CUDA_DOUBLE_POOL_HANDLE_TYPES=0.
TEST(ResourceWithoutExport, PosixFdRefusedWhenTheDeviceListsNoHandleTypes)
{
  EXPECT_THROW(cuda_async_memory_resource(0, {}, handle_type::posix_file_descriptor), asyncshim::logic_error);
  EXPECT_NO_THROW(cuda_async_memory_resource(0, {}, handle_type::none));
}

// Run with CUDA_DOUBLE_DEVICES=0.
TEST(ResourceWithoutDevice, ConstructionFailsWithTheCudaErrorName)
{
  try {
    cuda_async_memory_resource mr{0};
    FAIL() << "expected a cuda_error";
  } catch (asyncshim::cuda_error const& e) {
    EXPECT_EQ(e.error(), cudaErrorNoDevice);
    EXPECT_NE(std::string{e.what()}.find("cudaErrorNoDevice"), std::string::npos) << e.what();
  }
}

TEST(ResourceEnum, HandleTypeValuesAreCudas)
{
  EXPECT_EQ(static_cast<int>(handle_type::none), static_cast<int>(cudaMemHandleTypeNone));
  EXPECT_EQ(static_cast<int>(handle_type::posix_file_descriptor),
            static_cast<int>(cudaMemHandleTypePosixFileDescriptor));
  EXPECT_EQ(static_cast<int>(handle_type::win32), static_cast<int>(cudaMemHandleTypeWin32));
  EXPECT_EQ(static_cast<int>(handle_type::win32_kmt), static_cast<int>(cudaMemHandleTypeWin32Kmt));
  EXPECT_EQ(static_cast<int>(handle_type::fabric), static_cast<int>(cudaMemHandleTypeFabric));
  static_assert(!std::is_copy_constructible_v<cuda_async_memory_resource>);
  static_assert(!std::is_move_constructible_v<cuda_async_memory_resource>);
  static_assert(!std::is_copy_assignable_v<cuda_async_memory_resource>);
  static_assert(!std::is_move_assignable_v<cuda_async_memory_resource>);
}

// ---- allocation (RMM's shapes) --------------------------------------------

class ResourceAllocation : public ::testing::Test {
 protected:
  cuda_async_memory_resource mr{0, 4 * GiB};
};

TEST_F(ResourceAllocation, SizesFromZeroToOneGiB)
{
  for (std::size_t bytes : {std::size_t{0}, std::size_t{4}, KiB, MiB, GiB}) {
    void* p = mr.allocate(bytes);
    if (bytes == 0) {
      EXPECT_EQ(p, nullptr);
    } else {
      ASSERT_NE(p, nullptr) << bytes;
      EXPECT_TRUE(is_aligned(p, asyncshim::cuda_allocation_alignment)) << bytes;
      EXPECT_EQ(cuda_double_pointer_pool(p), mr.pool_handle());
    }
    mr.deallocate(p, bytes);
  }
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

TEST_F(ResourceAllocation, OnePebibyteIsOutOfMemoryAndClearsTheLastError)
{
  EXPECT_THROW((void)mr.allocate(PiB), asyncshim::out_of_memory);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  void* p = mr.allocate(KiB);  // the resource still works
  EXPECT_NE(p, nullptr);
  mr.deallocate(p, KiB);
}

TEST_F(ResourceAllocation, OutOfMemoryIsABadAlloc) { EXPECT_THROW((void)mr.allocate(PiB), std::bad_alloc); }

TEST_F(ResourceAllocation, TryAllocateReportsTheCudaErrorAndKeepsTheLastError)
{
  (void)cudaGetLastError();
  void* p = nullptr;
  EXPECT_EQ(mr.try_allocate_async(&p, PiB, cudaStreamLegacy), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(mr.try_allocate_async(&p, KiB, cudaStreamPerThread), cudaSuccess);
  EXPECT_EQ(cuda_double_last_alloc_stream(), cudaStreamPerThread);
  EXPECT_EQ(mr.try_deallocate_async(p, cudaStreamPerThread), cudaSuccess);
  EXPECT_EQ(cuda_double_last_free_stream(), cudaStreamPerThread);
}

TEST_F(ResourceAllocation, TwoSmallAllocationsDiffer)
{
  void* a = mr.allocate(4);
  void* b = mr.allocate(4);
  EXPECT_NE(a, b);
  mr.deallocate(a, 4);
  mr.deallocate(b, 4);
}

TEST_F(ResourceAllocation, AlignmentOverloads)
{
  for (std::size_t alignment : {std::size_t{1}, std::size_t{16}, std::size_t{256}}) {
    void* p = mr.allocate(100, alignment);
    EXPECT_TRUE(is_aligned(p, alignment));
    mr.deallocate(p, 100, alignment);
    void* q = mr.allocate_async(100, alignment, cudaStreamLegacy);
    EXPECT_TRUE(is_aligned(q, alignment));
    mr.deallocate_async(q, 100, alignment, cudaStreamLegacy);
  }
  EXPECT_THROW((void)mr.allocate(100, 512), asyncshim::logic_error);
  EXPECT_THROW((void)mr.allocate(100, 3), asyncshim::logic_error);
  EXPECT_THROW((void)mr.allocate_async(100, 0, cudaStreamLegacy), asyncshim::logic_error);
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

TEST_F(ResourceAllocation, AsyncOverloadsUseTheGivenStream)
{
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  void* p = mr.allocate_async(MiB, stream);
  EXPECT_EQ(cuda_double_last_alloc_stream(), stream);
  mr.deallocate_async(p, MiB, stream);
  EXPECT_EQ(cuda_double_last_free_stream(), stream);
  void* q = mr.allocate(MiB, stream);
  mr.deallocate(q, MiB, stream);
  EXPECT_EQ(cuda_double_last_free_stream(), stream);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(ResourceAllocation, RandomAllocateFreePattern)
{
  std::mt19937 rng{42};
  std::uniform_int_distribution<std::size_t> size{1, 8 * MiB};
  std::vector<std::pair<void*, std::size_t>> live;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      std::size_t const bytes = size(rng);
      void* p = mr.allocate(bytes);
      ASSERT_NE(p, nullptr);
      live.emplace_back(p, bytes);
    } else {
      std::size_t const victim = rng() % live.size();
      mr.deallocate(live[victim].first, live[victim].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  std::set<void*> distinct;
  for (auto const& [p, bytes] : live) {
    distinct.insert(p);
  }
  EXPECT_EQ(distinct.size(), live.size());
  for (auto const& [p, bytes] : live) {
    mr.deallocate(p, bytes);
  }
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

TEST_F(ResourceAllocation, ThreadsAllocateAndFreeEachOthersMemory)
{
  constexpr int threads = 8;
  constexpr int per_thread = 500;
  std::vector<std::vector<void*>> made(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        made[t].push_back(mr.allocate(KiB * (1 + i % 7)));
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  workers.clear();
  // Each thread frees what the next one allocated, on its own stream.
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      cudaStream_t stream = nullptr;
      EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
      auto const& victims = made[(t + 1) % threads];
      for (std::size_t i = 0; i < victims.size(); ++i) {
        mr.deallocate(victims[i], KiB * (1 + i % 7), stream);
      }
      EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  EXPECT_EQ(cuda_double_live_allocations(), 0);
}

TEST(ResourceEquality, SameResourceEqualsItselfOnly)
{
  cuda_async_memory_resource a{0};
  cuda_async_memory_resource b{0};
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_TRUE(a == a);
  EXPECT_FALSE(a.is_equal(b));
  EXPECT_TRUE(a != b);
  EXPECT_NE(a.pool_handle(), b.pool_handle());
}

}  // namespace
