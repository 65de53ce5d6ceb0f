// Which CUDA API the current thread is inside of, set by the shim's entry
// points for the length of an intercepted call:
//  - it decides where the resource's CUDA calls go (cuda/resource_backend.cpp):
//    the program's runtime for cudaMalloc/cudaFree, the driver for
//    cuMemAlloc/cuMemFree (a program with a static runtime has no other);
//  - a driver entry point reached from inside a runtime-level call (the
//    runtime's own cudaMalloc calling cuMemAlloc) passes straight through, so
//    no allocation is ever intercepted twice.
#pragma once

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

}  // namespace asyncshim::shim
