// CUDA errors for people: "CUDA_ERROR_OUT_OF_MEMORY (2: out of memory)", by
// the driver's names, with the number for those who search for it. A
// cudaError_t is named the same way: the runtime's codes equal the driver's
// where both have the error, and a code only the runtime has (such as 35,
// cudaErrorInsufficientDriver) has no driver name and is printed as
// "CUDA error 35". Every
// message that names a CUDA error formats it through cuda_status, inside the
// message (support/log.hpp).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace asyncshim::shim {

struct cuda_status {
  int code = 0;

  template <class Code>
  explicit constexpr cuda_status(Code c) noexcept : code{static_cast<int>(c)}
  {
  }
};

/// The driver's name and description of `code`; empty where the driver has none
/// (or is not loaded).
/// @{
struct cuda_status_words {
  std::string_view name;
  std::string_view text;
};
[[nodiscard]] cuda_status_words words_for(cuda_status error) noexcept;
/// @}

}  // namespace asyncshim::shim

template <>
struct fmt::formatter<asyncshim::shim::cuda_status> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }

  template <class Context>
  auto format(asyncshim::shim::cuda_status error, Context& ctx) const
  {
    auto const words = asyncshim::shim::words_for(error);
    if (words.name.empty()) { return fmt::format_to(ctx.out(), "CUDA error {}", error.code); }
    if (words.text.empty()) { return fmt::format_to(ctx.out(), "{} ({})", words.name, error.code); }
    return fmt::format_to(ctx.out(), "{} ({}: {})", words.name, error.code, words.text);
  }
};
