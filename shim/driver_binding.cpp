#include "driver_binding.hpp"

#include "bound_once.hpp"
#include "real_dlsym.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

namespace asyncshim::shim {
namespace {

struct found_path {
  char path[4096];
  bool found;
};

// Only copies the name: dlopen must not be called under dl_iterate_phdr.
int remember_libcuda(dl_phdr_info* info, std::size_t /*size*/, void* out)
{
  auto* found = static_cast<found_path*>(out);
  char const* name = info->dlpi_name;
  if (name == nullptr) { return 0; }
  char const* base = std::strrchr(name, '/');
  base = base != nullptr ? base + 1 : name;
  if (std::strcmp(base, "libcuda.so.1") != 0 || std::strlen(name) >= sizeof found->path) { return 0; }
  std::strcpy(found->path, name);
  found->found = true;
  return 1;
}

// libcuda.so.1 itself, never another library's definition of its functions
// (a second interposer's cuGetProcAddress would otherwise be taken for the
// driver's). It is looked for among the loaded objects first, so that no
// failing dlopen leaves a message in dlerror() for the program to find.
void* find_driver_library()
{
  found_path found{};
  dl_iterate_phdr(remember_libcuda, &found);
  if (!found.found) { return nullptr; }
  return dlopen(found.path, RTLD_LAZY | RTLD_NOLOAD);
}

template <class Fn>
void take(void* library, char const* name, Fn& out)
{
  out = reinterpret_cast<Fn>(real_dlsym(library, name));
}

driver_functions bind()
{
  driver_functions f;
  void* library = find_driver_library();
  if (library == nullptr) { return f; }
  take(library, "cuGetProcAddress", f.get_proc_address_v1);
  take(library, "cuGetProcAddress_v2", f.get_proc_address_v2);
  take(library, "cuMemAlloc_v2", f.mem_alloc);
  take(library, "cuMemFree_v2", f.mem_free);
  take(library, "cuCtxGetDevice", f.ctx_get_device);
  take(library, "cuCtxGetCurrent", f.ctx_get_current);
  take(library, "cuCtxSetCurrent", f.ctx_set_current);
  take(library, "cuDevicePrimaryCtxRetain", f.device_primary_ctx_retain);
  take(library, "cuDevicePrimaryCtxRelease_v2", f.device_primary_ctx_release);
  take(library, "cuCtxPushCurrent_v2", f.ctx_push_current);
  take(library, "cuCtxPopCurrent_v2", f.ctx_pop_current);
  take(library, "cuDriverGetVersion", f.driver_get_version);
  take(library, "cuDeviceGetAttribute", f.device_get_attribute);
  take(library, "cuMemGetInfo_v2", f.mem_get_info);
  take(library, "cuMemPoolCreate", f.mem_pool_create);
  take(library, "cuMemPoolDestroy", f.mem_pool_destroy);
  take(library, "cuMemPoolSetAttribute", f.mem_pool_set_attribute);
  take(library, "cuMemPoolGetAttribute", f.mem_pool_get_attribute);
  take(library, "cuMemAllocFromPoolAsync", f.mem_alloc_from_pool_async);
  take(library, "cuMemFreeAsync", f.mem_free_async);
  take(library, "cuGetErrorName", f.get_error_name);
  take(library, "cuGetErrorString", f.get_error_string);
  return f;
}

}  // namespace

driver_functions const& driver() noexcept
{
  struct tag {};
  return bound_once<tag, driver_functions>(bind);
}

}  // namespace asyncshim::shim
