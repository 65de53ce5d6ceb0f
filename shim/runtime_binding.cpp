#include "runtime_binding.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

namespace asyncshim::shim {
namespace {

// The symbol used to recognise a CUDA runtime. libasyncshim.so does not
// export it, so no lookup can find this library instead.
constexpr char const* probe_symbol = "cudaGetDevice";

// A handle to the loaded object that defines `symbol` (no new load: RTLD_NOLOAD).
void* library_of(void const* symbol)
{
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0) { return nullptr; }
  bool const is_main_program = info.dli_fname == nullptr || info.dli_fname[0] == '\0';
  return dlopen(is_main_program ? nullptr : info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

void* runtime_next_in_global_scope() { return library_of(dlsym(RTLD_NEXT, probe_symbol)); }

void* runtime_seen_by(void const* caller)
{
  void* caller_library = library_of(caller);
  return caller_library != nullptr ? library_of(dlsym(caller_library, probe_symbol)) : nullptr;
}

int remember_cudart(dl_phdr_info* info, std::size_t /*size*/, void* found)
{
  if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcudart") != nullptr) {
    *static_cast<void**>(found) = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    return *static_cast<void**>(found) != nullptr ? 1 : 0;
  }
  return 0;
}

void* any_loaded_cudart()
{
  void* found = nullptr;
  dl_iterate_phdr(remember_cudart, &found);
  return found;
}

template <class Fn>
void take(void* library, char const* name, Fn& out)
{
  out = reinterpret_cast<Fn>(dlsym(library, name));
}

runtime_functions bind(void const* caller)
{
  void* library = runtime_next_in_global_scope();
  if (library == nullptr) { library = runtime_seen_by(caller); }
  if (library == nullptr) { library = any_loaded_cudart(); }
  runtime_functions f;
  if (library == nullptr) { return f; }
  take(library, "cudaMalloc", f.malloc);
  take(library, "cudaFree", f.free);
  take(library, "cudaGetDevice", f.get_device);
  take(library, "cudaSetDevice", f.set_device);
  take(library, "cudaDeviceGetAttribute", f.device_get_attribute);
  take(library, "cudaDriverGetVersion", f.driver_get_version);
  take(library, "cudaMemGetInfo", f.mem_get_info);
  take(library, "cudaMemPoolCreate", f.mem_pool_create);
  take(library, "cudaMemPoolDestroy", f.mem_pool_destroy);
  take(library, "cudaMemPoolSetAttribute", f.mem_pool_set_attribute);
  take(library, "cudaMemPoolGetAttribute", f.mem_pool_get_attribute);
  take(library, "cudaMallocFromPoolAsync", f.malloc_from_pool_async);
  take(library, "cudaFreeAsync", f.free_async);
  take(library, "cudaGetLastError", f.get_last_error);
  take(library, "cudaGetErrorName", f.get_error_name);
  take(library, "cudaGetErrorString", f.get_error_string);
  return f;
}

}  // namespace

runtime_functions const& runtime(void const* caller) noexcept
{
  static runtime_functions const functions = bind(caller);
  return functions;
}

}  // namespace asyncshim::shim
