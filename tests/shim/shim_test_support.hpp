// What the tests of libasyncshim.so preloaded into a program linked against
// the CUDA test double share: the double's own entry points (bypassing the
// shim), the shim's log, and a fixture that checks the preload.
#pragma once

#include "cuda_double.hpp"
#include "byte_literals.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace shim_test {

using byte_literals::MiB;
using byte_literals::GiB;
using byte_literals::PiB;

enum pointer_kind { unknown = 0, native = 1, pool = 2 };

// The runtime double itself, whose cudaMalloc/cudaFree bypass the shim.
inline void* double_library()
{
  static void* handle = dlopen("libcudart_double.so", RTLD_LAZY | RTLD_NOLOAD);
  return handle;
}

// The double's own cudaMalloc: "native" memory.
inline cudaError_t native_malloc(void** p, std::size_t n)
{
  auto fn = reinterpret_cast<decltype(&cudaMalloc)>(dlsym(double_library(), "cudaMalloc"));
  return fn(p, n);
}

inline bool shim_is_preloaded()
{
  return dlsym(RTLD_DEFAULT, "cudaMalloc") != dlsym(double_library(), "cudaMalloc");
}

inline std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute)
{
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attribute, &value), cudaSuccess);
  return value;
}

// An attribute of the pool a live block came from.
inline std::uint64_t pool_attribute(void const* ptr, cudaMemPoolAttr attribute)
{
  return pool_attribute(cuda_double_pointer_pool(ptr), attribute);
}

// What ASYNCSHIM_LOG_FILE holds so far.
inline std::string log_text()
{
  char const* path = std::getenv("ASYNCSHIM_LOG_FILE");
  if (path == nullptr) { return {}; }
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Under device ordering (the default) a free is queued until its batch is
// issued; a device synchronization issues every queued free.
inline void issue_queued_frees() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override
  {
    ASSERT_NE(double_library(), nullptr);
    ASSERT_TRUE(shim_is_preloaded()) << "run this test with LD_PRELOAD=libasyncshim.so";
    (void)cudaGetLastError();
  }
};

}  // namespace shim_test
