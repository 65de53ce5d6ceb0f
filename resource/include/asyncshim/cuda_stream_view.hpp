// A non-owning view of a CUDA stream, as in RMM: implicitly made from a
// cudaStream_t, defaulting to the legacy default stream.
#pragma once

#include <cuda_runtime_api.h>

namespace asyncshim {

class cuda_stream_view {
 public:
  constexpr cuda_stream_view() noexcept = default;
  constexpr cuda_stream_view(cudaStream_t stream) noexcept : stream_{stream} {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return stream_; }
  constexpr operator cudaStream_t() const noexcept { return stream_; }  // NOLINT(google-explicit-constructor)

 private:
  cudaStream_t stream_{nullptr};
};

// The legacy default stream, the stream RMM calls cuda_stream_default.
inline constexpr cuda_stream_view cuda_stream_default{};

}  // namespace asyncshim
