// cuda_async_memory_resource on a real device (RMM's resource-test shapes).
// Without a device every test skips with the reason.
#include "byte_literals.hpp"

#include <asyncshim/cuda_async_memory_resource.hpp>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace {

using asyncshim::cuda_async_memory_resource;
using handle_type = cuda_async_memory_resource::allocation_handle_type;

using byte_literals::GiB;
using byte_literals::KiB;
using byte_literals::MiB;
using byte_literals::PiB;

bool have_device()
{
  int count = 0;
  bool const ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  return ok;
}

std::uint64_t attribute(cudaMemPool_t pool, cudaMemPoolAttr attr)
{
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &value), cudaSuccess);
  return value;
}

class GpuResource : public ::testing::Test {
 protected:
  void SetUp() override
  {
    if (!have_device()) { GTEST_SKIP() << "SKIP: no CUDA device on this machine"; }
  }
};

TEST_F(GpuResource, SeedDefaults)
{
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  cuda_async_memory_resource mr;
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrReleaseThreshold), total);
  std::uint64_t const reserved = attribute(mr.pool_handle(), cudaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, free / 2 - 64 * MiB);
  EXPECT_LE(reserved, free / 2 + 64 * MiB);
}

TEST_F(GpuResource, ExplicitSizes)
{
  cuda_async_memory_resource mr{1 * GiB, 2 * GiB};
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrReleaseThreshold), 2 * GiB);
  EXPECT_GE(attribute(mr.pool_handle(), cudaMemPoolAttrReservedMemCurrent), 1 * GiB);
  cuda_async_memory_resource unprimed{0};
  EXPECT_EQ(attribute(unprimed.pool_handle(), cudaMemPoolAttrReservedMemCurrent), 0U);
}

TEST_F(GpuResource, SizesAlignmentAndOutOfMemory)
{
  cuda_async_memory_resource mr{0};
  for (std::size_t bytes : {std::size_t{0}, std::size_t{4}, KiB, MiB, GiB}) {
    void* p = mr.allocate(bytes);
    if (bytes > 0) {
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
      EXPECT_EQ(cudaMemsetAsync(p, 0xab, bytes, cudaStreamLegacy), cudaSuccess);
    }
    mr.deallocate(p, bytes);
  }
  EXPECT_THROW((void)mr.allocate(PiB), asyncshim::out_of_memory);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  void* a = mr.allocate(4);
  void* b = mr.allocate(4);
  EXPECT_NE(a, b);
  mr.deallocate(a, 4);
  mr.deallocate(b, 4);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(GpuResource, ExportHandleTypes)
{
  int supported = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0), cudaSuccess);
  if ((supported & cudaMemHandleTypePosixFileDescriptor) != 0) {
    cuda_async_memory_resource mr{0, {}, handle_type::posix_file_descriptor};
    int fd = -1;
    EXPECT_EQ(cudaMemPoolExportToShareableHandle(&fd, mr.pool_handle(), cudaMemHandleTypePosixFileDescriptor, 0),
              cudaSuccess);
    EXPECT_GE(fd, 0);
  }
  EXPECT_THROW(cuda_async_memory_resource(0, {}, handle_type::win32), asyncshim::logic_error);
}

TEST_F(GpuResource, RandomPatternAcrossStreamsAndThreads)
{
  cuda_async_memory_resource mr{256 * MiB};
  constexpr int threads = 8;
  std::vector<std::vector<std::pair<void*, std::size_t>>> made(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      cudaStream_t stream = nullptr;
      EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
      std::mt19937 rng{static_cast<unsigned>(t)};
      for (int i = 0; i < 400; ++i) {
        std::size_t const bytes = 1 + rng() % (4 * MiB);
        void* p = mr.allocate_async(bytes, stream);
        EXPECT_EQ(cudaMemsetAsync(p, t, bytes, stream), cudaSuccess);
        if (rng() % 2 == 0) {
          mr.deallocate_async(p, bytes, stream);
        } else {
          made[t].emplace_back(p, bytes);
        }
      }
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  workers.clear();
  for (int t = 0; t < threads; ++t) {  // freed by another thread, on the default stream
    workers.emplace_back([&, t] {
      for (auto [p, bytes] : made[(t + 1) % threads]) {
        mr.deallocate(p, bytes);
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(attribute(mr.pool_handle(), cudaMemPoolAttrUsedMemCurrent), 0U);
}

}  // namespace
