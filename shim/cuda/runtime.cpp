#include "cuda/runtime.hpp"

#include "cuda/loader.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

namespace asyncshim::shim {
namespace {

// The symbol used to recognise a CUDA runtime. libasyncshim.so does not
// export it, so no lookup can find this library instead.
constexpr char const* probe_symbol = "cudaGetDevice";

// A handle to the loaded object that defines `symbol` (no new load: RTLD_NOLOAD).
// dladdr names the main program after argv[0], which dlopen cannot find, so
// the object is identified through its link map instead.
void* library_of(void const* symbol)
{
  Dl_info info{};
  link_map* map = nullptr;
  if (symbol == nullptr || dladdr1(symbol, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
      map == nullptr) {
    return nullptr;
  }
  bool const is_main_program = map->l_name == nullptr || map->l_name[0] == '\0';
  return dlopen(is_main_program ? nullptr : map->l_name, RTLD_LAZY | RTLD_NOLOAD);
}

void* runtime_next_in_global_scope() { return library_of(real_dlsym(RTLD_NEXT, probe_symbol)); }

void* runtime_seen_by(void const* caller)
{
  void* caller_library = library_of(caller);
  return caller_library != nullptr ? library_of(real_dlsym(caller_library, probe_symbol)) : nullptr;
}

bool is_libcudart(char const* path) { return std::strstr(path, "libcudart") != nullptr; }

runtime_functions bind(void const* caller)
{
  void* library = runtime_next_in_global_scope();
  if (library == nullptr) { library = runtime_seen_by(caller); }
  if (library == nullptr) { library = loaded_library(is_libcudart); }
  runtime_functions f;
  if (library == nullptr) { return f; }
#define ASYNCSHIM_RUNTIME_FUNCTION(field, symbol)                        take_function(library, #symbol, f.field);
#define ASYNCSHIM_RUNTIME_HOOK(field, symbol, params, hook_params, args) take_function(library, #symbol, f.field);
#include "cuda/api_table.def"
  return f;
}

}  // namespace

runtime_functions const& runtime(void const* caller) noexcept
{
  // Only a successful search is kept: a program may load its runtime after an
  // early call (dlsym finds this library's cudaFree before any runtime exists).
  struct tag {};
  return bound_once<tag, runtime_functions>([caller] { return bind(caller); });
}

}  // namespace asyncshim::shim
