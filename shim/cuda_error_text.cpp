#include "cuda_error_text.hpp"

#include "driver_binding.hpp"

#include <fmt/format.h>

namespace asyncshim::shim {

std::string cuda_error_text(int code)
{
  auto const& drv = driver();
  char const* name = nullptr;
  char const* text = nullptr;
  auto const result = static_cast<CUresult>(code);
  if (drv.get_error_name == nullptr || drv.get_error_name(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return fmt::format("CUDA error {}", code);
  }
  if (drv.get_error_string == nullptr || drv.get_error_string(result, &text) != CUDA_SUCCESS || text == nullptr) {
    return fmt::format("{} ({})", name, code);
  }
  return fmt::format("{} ({}: {})", name, code, text);
}

}  // namespace asyncshim::shim
