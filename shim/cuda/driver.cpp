#include "cuda/driver.hpp"

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
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, params, args) \
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

}  // namespace asyncshim::shim
