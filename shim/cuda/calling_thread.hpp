// What the calling thread is in, for the shim's own CUDA calls.
//  - The API level: which CUDA API the thread is inside of, set by the
//    shim's entry points for the length of an intercepted call. It decides
//    where the resource's CUDA calls go (cuda/resource_backend.cpp): the
//    program's runtime for cudaMalloc/cudaFree, the driver for
//    cuMemAlloc/cuMemFree (a program with a static runtime has no other).
//    A driver entry point reached from inside a runtime-level call (the
//    runtime's own cudaMalloc calling cuMemAlloc) passes straight through,
//    so no allocation is ever intercepted twice.
//  - The current CUDA context: whether there is one, making a given one
//    current for a scope, making the device that owns a block current for
//    its free, and waiting for the device. Every scope leaves the context
//    stack (or the runtime's device) exactly as it found it.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <optional>

namespace asyncshim::shim {

enum class api_level { none, runtime, driver };

[[nodiscard]] api_level current_api_level() noexcept;

class api_level_scope {
 public:
  explicit api_level_scope(api_level level) noexcept;
  ~api_level_scope();
  api_level_scope(api_level_scope const&) = delete;
  api_level_scope& operator=(api_level_scope const&) = delete;

 private:
  api_level previous_;
};

/// The calling thread's current context; null when there is none (or no driver).
[[nodiscard]] CUcontext current_context() noexcept;
[[nodiscard]] inline bool context_is_current() noexcept { return current_context() != nullptr; }

/// Waits for the current context's device, as native cudaFree does, at the
/// caller's API level.
[[nodiscard]] cudaError_t synchronize_device(api_level level) noexcept;

/// Makes `context` current for the scope (pushed, then popped), unless it is
/// current already.
class context_scope {
 public:
  explicit context_scope(CUcontext context) noexcept;
  ~context_scope();
  context_scope(context_scope const&) = delete;
  context_scope& operator=(context_scope const&) = delete;

  [[nodiscard]] bool current() const noexcept { return status_ == CUDA_SUCCESS; }
  /// Why `context` could not be made current, or CUDA_SUCCESS.
  [[nodiscard]] CUresult status() const noexcept { return status_; }

 private:
  bool pushed_ = false;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

/// Makes the device that owns a block current for its free, then puts back
/// what was current: the runtime's device, or at the driver level the exact
/// context (which may be one the program made itself). At the driver level
/// with no context current, nothing is switched (the free then fails as
/// natively).
class owner_device_scope {
 public:
  owner_device_scope(api_level level, int owner) noexcept;
  ~owner_device_scope();
  owner_device_scope(owner_device_scope const&) = delete;
  owner_device_scope& operator=(owner_device_scope const&) = delete;

  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  /// Driver level: the owner's primary context, retained for the scope and current in it.
  /// @{
  int retained_device_ = -1;
  std::optional<context_scope> owner_context_;
  /// @}
  /// Runtime level: the device to set back.
  /// @{
  int previous_device_ = 0;
  bool device_switched_ = false;
  /// @}
  cudaError_t status_ = cudaSuccess;
};

}  // namespace asyncshim::shim
