#include "cuda/error_text.hpp"

#include "cuda/driver.hpp"

namespace asyncshim::shim {

cuda_status_words words_for(cuda_status error) noexcept
{
  auto const& drv = driver();
  auto const result = static_cast<CUresult>(error.code);
  char const* name = nullptr;
  char const* text = nullptr;
  if (drv.get_error_name == nullptr || drv.get_error_name(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return {};
  }
  if (drv.get_error_string == nullptr || drv.get_error_string(result, &text) != CUDA_SUCCESS || text == nullptr) {
    return {name, {}};
  }
  return {name, text};
}

}  // namespace asyncshim::shim
