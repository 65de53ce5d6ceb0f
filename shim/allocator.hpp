// What the interposed cudaMalloc and cudaFree do (entry_points.cpp only forwards).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace asyncshim::shim {

// `caller` is the return address of the interposed call (see runtime_binding.hpp).
[[nodiscard]] cudaError_t allocate(void** dev_ptr, std::size_t size, void const* caller) noexcept;
[[nodiscard]] cudaError_t deallocate(void* ptr, void const* caller) noexcept;

}  // namespace asyncshim::shim
