#include "driver_binding.hpp"

#include "bound_once.hpp"
#include "real_dlsym.hpp"

#include <dlfcn.h>

namespace asyncshim::shim {
namespace {

void* find_driver_library()
{
  if (void* symbol = real_dlsym(RTLD_NEXT, "cuGetProcAddress_v2")) {
    Dl_info info{};
    if (dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) {
      if (void* library = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) { return library; }
    }
  }
  return dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
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
