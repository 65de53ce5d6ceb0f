// Turning failed CUDA calls into the resource's exceptions (RMM_CUDA_TRY-like):
// the message names the call, the CUDA error and where it happened, and CUDA's
// last-error state is cleared so the failure does not leak into later checks.
#pragma once

#include <asyncshim/errors.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace asyncshim::detail {

[[noreturn]] void throw_cuda_error(cudaError_t error, char const* call, char const* file, int line);

// "cudaErrorMemoryAllocation (out of memory)" for an error code.
[[nodiscard]] std::string describe_cuda_error(cudaError_t error);

}  // namespace asyncshim::detail

#define ASYNCSHIM_CUDA_TRY(call)                                                                   \
  do {                                                                                             \
    cudaError_t const asyncshim_cuda_try_error_ = (call);                                          \
    if (asyncshim_cuda_try_error_ != cudaSuccess) {                                                \
      ::asyncshim::detail::throw_cuda_error(asyncshim_cuda_try_error_, #call, __FILE__, __LINE__); \
    }                                                                                              \
  } while (false)
