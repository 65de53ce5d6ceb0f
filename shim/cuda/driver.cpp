#include "cuda/driver.hpp"

#include "cuda/error_text.hpp"
#include "cuda/loader.hpp"

#include <cstring>

namespace asyncshim::shim {
namespace {

bool is_libcuda(char const* path)
{
  char const* base = std::strrchr(path, '/');
  return std::strcmp(base != nullptr ? base + 1 : path, "libcuda.so.1") == 0;
}

driver_functions bind()
{
  driver_functions f;
  // libcuda.so.1 itself, never another library's definition of its functions
  // (a second interposer's cuGetProcAddress would otherwise be taken for the
  // driver's).
  void* library = loaded_library(is_libcuda);
  if (library == nullptr) { return f; }
#define ASYNCSHIM_DRIVER_FUNCTION(field, symbol)              take_function(library, #symbol, f.field);
#define ASYNCSHIM_DRIVER_VARIANT(field, symbol, same_type_as) take_function(library, #symbol, f.field);
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, abi, params, args) \
  take_function(library, #symbol, f.field);
#include "cuda/api_table.def"
  return f;
}

}  // namespace

driver_functions const& driver() noexcept
{
  struct tag {};
  return bound_once<tag, driver_functions>(bind);
}

// The words of cuda/error_text.hpp are the driver's.
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
