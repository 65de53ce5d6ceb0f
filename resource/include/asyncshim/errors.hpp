// The exceptions the resource throws, shaped like RMM's:
//  - logic_error:    a missing capability or a misuse (e.g. an unsupported export handle type);
//  - bad_alloc:      an allocation failed for a reason other than memory;
//  - out_of_memory:  the pool cannot grow to satisfy the request (a bad_alloc);
//  - cuda_error:     any other failing CUDA call; the message names the CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <stdexcept>
#include <string>

#define ASYNCSHIM_PUBLIC __attribute__((visibility("default")))

namespace asyncshim {

class ASYNCSHIM_PUBLIC logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class ASYNCSHIM_PUBLIC cuda_error : public std::runtime_error {
 public:
  cuda_error(std::string const& what, cudaError_t error) : std::runtime_error{what}, error_{error} {}
  [[nodiscard]] cudaError_t error() const noexcept { return error_; }

 private:
  cudaError_t error_;
};

class ASYNCSHIM_PUBLIC bad_alloc : public std::bad_alloc {
 public:
  bad_alloc(std::string what, cudaError_t error) : what_{std::move(what)}, error_{error} {}
  [[nodiscard]] char const* what() const noexcept override { return what_.c_str(); }
  [[nodiscard]] cudaError_t error() const noexcept { return error_; }

 private:
  std::string what_;
  cudaError_t error_;
};

class ASYNCSHIM_PUBLIC out_of_memory : public bad_alloc {
 public:
  using bad_alloc::bad_alloc;
};

}  // namespace asyncshim
